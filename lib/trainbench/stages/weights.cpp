#include "trainbench/stages/weights.hpp"

#include <ATen/core/Dict.h>
#include <c10/util/Exception.h>
#include <torch/serialize.h>

#include <fstream>
#include <map>

#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {

namespace {
std::map<std::string, at::Tensor> state_of(const torch::nn::Module& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : model.named_parameters()) out[item.key()] = item.value();
  for (const auto& item : model.named_buffers()) out[item.key()] = item.value();
  return out;
}

std::string shape_text(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}
}  // namespace

void load_weights(torch::nn::Module& model, const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw input_error("model.weights '" + file.string() + "': no such file");
  const std::string bytes = read_text_file(file);
  c10::IValue value;
  try {
    value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const c10::Error& e) {
    // Without LibTorch's C++ stack trace: it helps nobody who gave a wrong file.
    throw input_error("model.weights '" + file.string() +
                      "': not a state dict saved by torch.save: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw input_error("model.weights '" + file.string() + "': not a state dict saved by torch.save: " + e.what());
  }
  if (!value.isGenericDict())
    throw input_error("model.weights '" + file.string() +
                      "': expected a dict of tensors (save dict(model.state_dict()))");
  auto target = state_of(model);
  std::map<std::string, at::Tensor> loaded;
  std::vector<std::string> unexpected, misshaped, missing;
  for (const auto& entry : value.toGenericDict()) {
    const std::string key = entry.key().toStringRef();
    auto it = target.find(key);
    if (it == target.end() || !entry.value().isTensor()) {
      unexpected.push_back(key);
      continue;
    }
    at::Tensor t = entry.value().toTensor();
    if (t.sizes() != it->second.sizes())
      misshaped.push_back(key + " " + shape_text(t) + " vs " + shape_text(it->second));
    else
      loaded[key] = t;
  }
  for (const auto& [key, t] : target)
    if (!loaded.count(key) && std::find_if(misshaped.begin(), misshaped.end(), [&](const std::string& m) {
                                return m.rfind(key + " ", 0) == 0;
                              }) == misshaped.end())
      missing.push_back(key);
  if (!unexpected.empty() || !misshaped.empty() || !missing.empty()) {
    std::string msg = "model.weights '" + file.string() + "' does not match " + model.name() + ":";
    if (!missing.empty()) msg += " missing keys: " + join(missing, ", ") + ";";
    if (!unexpected.empty()) msg += " unexpected keys: " + join(unexpected, ", ") + ";";
    if (!misshaped.empty()) msg += " mis-shaped keys: " + join(misshaped, ", ") + ";";
    throw input_error(msg);
  }
  torch::NoGradGuard no_grad;
  for (auto& [key, t] : loaded) target[key].copy_(t);
}

void save_weights(const torch::nn::Module& model, const std::filesystem::path& file) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [key, t] : state_of(model)) dict.insert(key, t.detach().cpu());
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  write_file_atomic(file, std::string(bytes.begin(), bytes.end()));
}

}  // namespace trainbench
