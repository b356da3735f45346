// An NVTX injection library for the tests: what Nsight Systems receives, written to a file.
// NVTX loads the library named by NVTX_INJECTION64_PATH at the first NVTX call and calls its
// InitializeInjectionNvtx2, which fills NVTX's function tables (once per copy of NVTX in the
// process: every library built with the NVTX3 headers has its own). Each domain create, push and
// pop becomes one line of the file named by TRAINBENCH_NVTX_LOG, written with one write(2) so
// that lines of several threads never mix and a process that dies keeps what it wrote:
//   domain <tid> <ns> <domain id> <name>
//   push   <tid> <ns> <domain id> <text>
//   pop    <tid> <ns> <domain id>
// Domain 0 is NVTX's default domain (nvtxRangePush); <ns> is CLOCK_MONOTONIC (steady_clock).
#include <fcntl.h>
#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

int log_fd() {
  static const int fd = [] {
    const char* path = std::getenv("TRAINBENCH_NVTX_LOG");
    return path ? ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
  }();
  return fd;
}

std::atomic<std::uintptr_t> next_domain{1};
thread_local int depth = 0;  // what push and pop return: the nesting level

void put(const char* kind, std::uintptr_t domain, const char* text) {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const long long ns = static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
  const long tid = static_cast<long>(::syscall(SYS_gettid));
  char line[512];
  int n =
      text ? std::snprintf(line, sizeof line, "%s %ld %lld %lu %s\n", kind, tid, ns, static_cast<unsigned long>(domain),
                           text)
           : std::snprintf(line, sizeof line, "%s %ld %lld %lu\n", kind, tid, ns, static_cast<unsigned long>(domain));
  if (n < 0) return;
  if (n >= static_cast<int>(sizeof line)) {
    n = static_cast<int>(sizeof line) - 1;
    line[n - 1] = '\n';
  }
  if (log_fd() >= 0) (void)!::write(log_fd(), line, static_cast<std::size_t>(n));
}

std::uintptr_t id_of(nvtxDomainHandle_t d) { return reinterpret_cast<std::uintptr_t>(d); }

const char* text_of(const nvtxEventAttributes_t* a) {
  if (!a) return "(no attributes)";
  return a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii ? a->message.ascii : "(not ascii)";
}

nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  const std::uintptr_t id = next_domain.fetch_add(1);
  put("domain", id, name ? name : "");
  return reinterpret_cast<nvtxDomainHandle_t>(id);
}

int NVTX_API domain_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  put("push", id_of(d), text_of(a));
  return depth++;
}

int NVTX_API domain_pop(nvtxDomainHandle_t d) {
  put("pop", id_of(d), nullptr);
  return --depth;
}

int NVTX_API push_ex(const nvtxEventAttributes_t* a) {
  put("push", 0, text_of(a));
  return depth++;
}

int NVTX_API push_a(const char* text) {
  put("push", 0, text ? text : "");
  return depth++;
}

int NVTX_API pop() {
  put("pop", 0, nullptr);
  return --depth;
}

template <class F>
void set(NvtxGetExportTableFunc_t get, NvtxCallbackModule module, unsigned id, F fn) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get(NVTX_ETID_CALLBACKS));
  if (!callbacks || !callbacks->GetModuleFunctionTable) return;
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (!callbacks->GetModuleFunctionTable(module, &table, &size) || !table || id > size || !table[id]) return;
  *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
  if (!get) return 0;
  set(get, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushEx, push_ex);
  set(get, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushA, push_a);
  set(get, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePop, pop);
  set(get, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainCreateA, domain_create);
  set(get, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePushEx, domain_push);
  set(get, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePop, domain_pop);
  return 1;
}
