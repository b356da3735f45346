#pragma once
// model.weights: a state dict of the same architecture exported from PyTorch with
//   torch.save(dict(torchvision.models.resnet50(num_classes=10).state_dict()), "resnet50.pt")
#include <torch/nn/module.h>

#include <filesystem>

namespace trainbench {

// Matches every key by name and shape; throws input_error listing missing, unexpected and
// mis-shaped keys (naming the module: the architecture, for a ResNet), and leaves the module
// untouched when anything does not match.
void load_weights(torch::nn::Module& model, const std::filesystem::path& file);
void save_weights(const torch::nn::Module& model, const std::filesystem::path& file);

}  // namespace trainbench
