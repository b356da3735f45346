#pragma once
// model.weights: a ResNet-18 state dict exported from PyTorch with
//   torch.save(dict(model.state_dict()), "resnet18.pt")
#include <torch/nn/module.h>

#include <filesystem>

namespace trainbench {

// Matches every key by name and shape; throws input_error listing missing, unexpected and
// mis-shaped keys, and leaves the module untouched when anything does not match.
void load_weights(torch::nn::Module& model, const std::filesystem::path& file);
void save_weights(const torch::nn::Module& model, const std::filesystem::path& file);

}  // namespace trainbench
