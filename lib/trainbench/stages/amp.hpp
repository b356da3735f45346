#pragma once
// Autocast entered and left the way Python's torch.autocast does: nesting counter, and the
// cast cache cleared when the outermost scope exits (its fp16 weight copies go stale after step()).
#include "trainbench/util/torch_compat.hpp"

namespace trainbench {

class autocast_scope {
 public:
  autocast_scope(c10::DeviceType device, at::ScalarType dtype, bool enabled)
      : device_(device), enabled_(enabled), was_enabled_(compat::autocast_enabled(device)) {
    if (!enabled_) return;
    compat::set_autocast(device_, true, dtype);
    at::autocast::increment_nesting();
  }
  ~autocast_scope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    compat::set_autocast(device_, was_enabled_, at::autocast::get_autocast_dtype(device_));
  }
  autocast_scope(const autocast_scope&) = delete;
  autocast_scope& operator=(const autocast_scope&) = delete;

 private:
  c10::DeviceType device_;
  bool enabled_, was_enabled_;
};

}  // namespace trainbench
