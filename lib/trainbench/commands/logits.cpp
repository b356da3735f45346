// trainbench logits (not listed in --help): the profile's model in eval mode on a saved input,
// on the CPU in fp32, so scripts/check-torchvision.py can put its logits beside torchvision's.
#include <ATen/Parallel.h>
#include <torch/serialize.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "trainbench/commands/commands.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/stages/weights.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"

namespace trainbench {

namespace {

at::Tensor read_input(const std::string& file) {
  const std::string bytes = read_text_file(file);
  c10::IValue value;
  try {
    value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    throw input_error("logits --input '" + file + "': not a tensor saved by torch.save: " + e.what());
  }
  if (!value.isTensor()) throw input_error("logits --input '" + file + "': expected one tensor");
  at::Tensor t = value.toTensor();
  if (t.dim() != 4 || t.size(1) != 3 || t.scalar_type() != at::kFloat)
    throw input_error("logits --input '" + file + "': expected a float32 tensor of N x 3 x H x W");
  return t.contiguous();
}

}  // namespace

int logits_command(const logits_request& r) {
  const profile p = load_profile(r.config, r.sets).value;
  if (p.threads > 0) at::set_num_threads(p.threads);
  const at::Tensor input = read_input(r.input);
  resnet model = make_resnet(p.model.arch, p.model.num_classes, p.model.zero_init_residual);
  if (!p.model.weights.empty()) load_weights(*model, p.model.weights);
  model->eval();
  at::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model->forward(input);
  }
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(logits));
  write_file_atomic(r.out, std::string(bytes.begin(), bytes.end()));
  const nlohmann::ordered_json summary = {
      {"arch", p.model.arch},
      {"parameters", parameter_count(*model)},
      {"input_shape", input.sizes().vec()},
      {"forward_flops_per_sample",
       forward_flops(*find_resnet_spec(p.model.arch), p.model.num_classes, input.size(2), input.size(3))},
      {"logits", r.out}};
  std::cout << summary.dump() << "\n";
  return exit_code::ok;
}

}  // namespace trainbench
