#pragma once
// Gradient averaging the way DistributedDataParallel does it: parameters in buckets that close
// once they hold dist.bucket_mb, in reverse order (the order backward produces their gradients);
// a bucket's all-reduce starts as soon as its last gradient is accumulated, while backward goes
// on with the rest; finish() waits for the buckets and writes the averaged gradients back.
#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "trainbench/distributed/process_group.hpp"

namespace trainbench {

struct grad_bucket;

// Host-clock figures for the last synchronised step (meaningful where wait() blocks: Gloo).
struct sync_timing {
  double launch_to_done_s = 0;       // first bucket launched -> last bucket finished
  double launched_in_backward = 0;   // share of the buckets launched before backward returned
};

class grad_sync {
 public:
  grad_sync(std::vector<at::Tensor> params, process_group& group, double bucket_mb, int accumulation);
  ~grad_sync();
  grad_sync(const grad_sync&) = delete;
  grad_sync& operator=(const grad_sync&) = delete;

  // Before each backward: whether this micro-batch's gradients get all-reduced (the last of k).
  void begin_backward();
  // After backward: launches what the hooks did not, waits, writes averaged gradients back.
  // Returns whether this micro-batch was synchronised.
  bool finish();

  std::vector<std::int64_t> bucket_bytes() const;
  const sync_timing& last_timing() const { return timing_; }
  void on_gradient_ready(std::size_t param);  // called by the autograd hook

 private:
  void launch_ready();
  void launch(grad_bucket& b);

  std::vector<at::Tensor> params_;
  process_group& group_;
  int accumulation_;
  at::Tensor world_;  // a CPU scalar: dividing by it works for gradients on any device
  std::int64_t backward_calls_ = 0;
  bool syncing_ = false;
  bool in_backward_ = false;
  std::vector<std::unique_ptr<grad_bucket>> buckets_;
  std::vector<std::size_t> bucket_of_;  // param -> bucket
  std::vector<std::size_t> slot_of_;    // param -> position in its bucket
  std::size_t next_launch_ = 0;         // buckets launch strictly in order, the same on every rank
  std::size_t launched_ = 0, launched_in_backward_ = 0;
  std::chrono::steady_clock::time_point first_launch_;
  sync_timing timing_;
};

}  // namespace trainbench
