#pragma once
// data.preprocess: device. The loader ships uint8 source images; resize and normalise run
// where the step runs, with the same filter as the host transform.
#include <ATen/core/Tensor.h>

#include <vector>

namespace trainbench {

class device_preprocess {
 public:
  device_preprocess(int image_size, const std::vector<double>& mean, const std::vector<double>& std, bool channels_last,
                    c10::Device device);
  // raw: uint8 [B,H,W,C] (C = 1 or 3); returns float [B,3,S,S].
  at::Tensor operator()(const at::Tensor& raw) const;

 private:
  int size_;
  bool channels_last_;
  at::Tensor scale_, bias_;
};

}  // namespace trainbench
