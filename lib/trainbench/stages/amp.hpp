#pragma once
// Autocast entered and left the way Python's torch.autocast does: nesting counter, the cast cache
// cleared when the outermost scope exits (its fp16 weight copies go stale after step()), and the
// previous enabled flag and dtype restored.
#include "trainbench/util/torch_compat.hpp"

namespace trainbench {

class autocast_scope {
 public:
  autocast_scope(c10::DeviceType device, at::ScalarType dtype, bool enabled)
      : device_(device),
        enabled_(enabled),
        was_enabled_(compat::autocast_enabled(device)),
        was_dtype_(at::autocast::get_autocast_dtype(device)) {
    if (!enabled_) return;
    compat::set_autocast(device_, true, dtype);
    at::autocast::increment_nesting();
  }
  ~autocast_scope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    compat::set_autocast(device_, was_enabled_, was_dtype_);
  }
  autocast_scope(const autocast_scope&) = delete;
  autocast_scope& operator=(const autocast_scope&) = delete;

 private:
  c10::DeviceType device_;
  bool enabled_, was_enabled_;
  at::ScalarType was_dtype_;
};

// Turns the autocast weight cache off (a CUDA graph must not capture cached casts, which would
// go stale) and restores the previous setting however the scope is left: a capture that throws
// (the batch-size search provokes exactly that) must not leave later steps without their cache.
class autocast_cache_off {
 public:
  autocast_cache_off() : was_enabled_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~autocast_cache_off() { at::autocast::set_autocast_cache_enabled(was_enabled_); }
  autocast_cache_off(const autocast_cache_off&) = delete;
  autocast_cache_off& operator=(const autocast_cache_off&) = delete;

 private:
  bool was_enabled_;
};

}  // namespace trainbench
