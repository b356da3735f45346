#pragma once
// The fused crop on the GPU: one launch crops, resizes, flips, normalises and converts a whole
// batch (one job per image, job i into slot i), with the arithmetic of the host path (see
// data/fused_crop.hpp; the kernel is fused_crop.cu). No CUDA or torch headers here: the stream is
// the runtime's cudaStream_t (a CUstream_st*).
#include <memory>

#include "trainbench/data/fused_crop_math.hpp"

struct CUstream_st;

namespace trainbench {

// Launches the kernel. Each launch copies its job table to the device from a pinned host buffer
// of its own, asynchronously on the launch's stream: the caller's jobs array may be reused as soon
// as launch() returns, and launches still in flight keep their tables. A table is reused once the
// kernel that read it has finished (an event per table); the launcher grows a new one rather than
// wait, up to 16 tables, then waits for the oldest.
//
// Under CUDA graph capture (any mode) a launch takes a table that is never reused, so every replay
// of the graph copies and crops the batch that was captured (the pixel and output addresses, and
// the pixels found there at replay time). Such tables live as long as the launcher: it must
// outlive the graphs that captured it.
//
// Not thread-safe: one launcher per stage. The current device must be the one the pixels and the
// output are on; all tables belong to the device that was current at the first launch.
class fused_crop_launcher {
 public:
  fused_crop_launcher();
  ~fused_crop_launcher();  // waits for the launches in flight, then frees the tables
  fused_crop_launcher(const fused_crop_launcher&) = delete;
  fused_crop_launcher& operator=(const fused_crop_launcher&) = delete;

  // Crops jobs[0, n) into out (device memory) on `stream`. Every job and the output are checked
  // first (std::invalid_argument naming the job and what is wrong); CUDA failures throw run_error.
  // n = 0 launches nothing.
  void launch(const fused_crop_job* jobs, int n, const fused_crop_output& out, const fused_crop_normalizer& norm,
              CUstream_st* stream);

  // Whether one launch can take jobs[0, n): the taps of the job that shrinks most must fit in a
  // block's shared memory (a shrink of up to about 150x on both axes, 370x on one). launch()
  // refuses a batch that does not; no CUDA call.
  static bool fits(const fused_crop_job* jobs, int n);

  // Makes `tables` reusable job tables of `jobs` entries now (pinned and device memory, which
  // synchronise the device), so launches of up to that many jobs allocate nothing later.
  void reserve(int jobs, int tables);

  // Job tables held: reusable ones, and those kept for captured graphs.
  int tables() const;
  int captured_tables() const;

 private:
  struct state;
  std::unique_ptr<state> s_;
};

}  // namespace trainbench
