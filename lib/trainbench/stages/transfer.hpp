#pragma once
// Moves host batches to the device. The runner submits batch i + lookahead() before it takes
// batch i, so a stage with lookahead 1 copies the next batch while the current one computes.
#include <memory>
#include <string>

#include "trainbench/data/loader.hpp"
#include "trainbench/stages/batch.hpp"
#include "trainbench/stages/device_decode.hpp"

namespace trainbench {

class transfer_stage {
 public:
  virtual ~transfer_stage() = default;
  virtual int lookahead() const { return 0; }
  // Starts the copy; hands the loader's slot back (with a fence) as soon as that is safe. The
  // fence may point into the stage (the CUDA stages' do, to keep it allocation-free), so the
  // loader must be destroyed before the stage: struct pipeline's member order does that.
  virtual void submit(const host_batch& batch, batch_loader& loader) = 0;
  // The oldest submitted batch, ready to be read by work enqueued on the compute stream.
  virtual device_batch take() = 0;
  // The step that read the last taken batch has been enqueued.
  virtual void step_done() = 0;
  virtual std::string describe() const = 0;
  // Optional: copy straight into these (a CUDA graph's static inputs) instead of own buffers.
  virtual void set_destination(const at::Tensor& images, const at::Tensor& labels) {
    (void)images;
    (void)labels;
  }
  virtual bool writes_destination() const { return false; }
  // data.decode: device: what the decoder has done so far (null for stages that only copy).
  virtual const device_decode_counts* decode_counts() const { return nullptr; }
};

// CPU device: the host batch is the device batch; its slot returns after the step.
std::unique_ptr<transfer_stage> make_passthrough_transfer();

}  // namespace trainbench
