#pragma once
// NVTX through one small header: ranges in the "trainbench" domain, free when NVTX is compiled out
// or switched off by measure.nvtx.
#include <cstdio>

#ifdef TRAINBENCH_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace trainbench {

constexpr bool nvtx_compiled_in() {
#ifdef TRAINBENCH_HAVE_NVTX
  return true;
#else
  return false;
#endif
}

class nvtx_range {
 public:
  nvtx_range(bool enabled, const char* name, long long index = -1) {
#ifdef TRAINBENCH_HAVE_NVTX
    if (!enabled) return;
    active_ = true;
    char text[96];
    if (index >= 0)
      std::snprintf(text, sizeof text, "%s %lld", name, index);
    else
      std::snprintf(text, sizeof text, "%s", name);
    nvtxEventAttributes_t attr{};
    attr.version = NVTX_VERSION;
    attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attr.message.ascii = text;
    nvtxDomainRangePushEx(domain(), &attr);
#else
    (void)enabled;
    (void)name;
    (void)index;
#endif
  }
  ~nvtx_range() {
#ifdef TRAINBENCH_HAVE_NVTX
    if (active_) nvtxDomainRangePop(domain());
#endif
  }
  nvtx_range(const nvtx_range&) = delete;
  nvtx_range& operator=(const nvtx_range&) = delete;

 private:
#ifdef TRAINBENCH_HAVE_NVTX
  static nvtxDomainHandle_t domain() {
    static nvtxDomainHandle_t d = nvtxDomainCreateA("trainbench");
    return d;
  }
  bool active_ = false;
#endif
};

}  // namespace trainbench
