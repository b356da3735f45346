#include "trainbench/config/profile.hpp"

#include <filesystem>

#include "trainbench/util/text.hpp"

namespace trainbench {

const char* to_string(data_source v) {
  switch (v) {
    case data_source::cifar10:
      return "cifar10";
    case data_source::fashion_mnist:
      return "fashion-mnist";
    case data_source::mnist:
      return "mnist";
    case data_source::synthetic:
      return "synthetic";
    case data_source::device_synthetic:
      return "device-synthetic";
    case data_source::imagefolder:
      return "imagefolder";
  }
  return "?";
}

const char* to_string(preprocess_place v) { return v == preprocess_place::host ? "host" : "device"; }

const char* to_string(data_fallback v) { return v == data_fallback::none ? "none" : "synthetic"; }

const char* to_string(amp_mode v) {
  switch (v) {
    case amp_mode::off:
      return "off";
    case amp_mode::fp16:
      return "fp16";
    case amp_mode::bf16:
      return "bf16";
  }
  return "?";
}

const char* to_string(switch_mode v) {
  switch (v) {
    case switch_mode::automatic:
      return "auto";
    case switch_mode::on:
      return "on";
    case switch_mode::off:
      return "off";
  }
  return "?";
}

const char* to_string(nvtx_level v) {
  switch (v) {
    case nvtx_level::off:
      return "off";
    case nvtx_level::batch:
      return "batch";
    case nvtx_level::stage:
      return "stage";
  }
  return "?";
}

const char* to_string(dist_backend v) {
  switch (v) {
    case dist_backend::none:
      return "none";
    case dist_backend::automatic:
      return "auto";
    case dist_backend::gloo:
      return "gloo";
    case dist_backend::nccl:
      return "nccl";
  }
  return "?";
}

const char* to_string(data_transform v) { return v == data_transform::train ? "train" : "eval"; }

const char* to_string(decode_place v) { return v == decode_place::host ? "host" : "device"; }

const char* to_string(bad_file_policy v) { return v == bad_file_policy::error ? "error" : "skip"; }

const char* to_string(fused_bn_route v) {
  switch (v) {
    case fused_bn_route::automatic:
      return "auto";
    case fused_bn_route::graph:
      return "graph";
    case fused_bn_route::ex:
      return "ex";
  }
  return "?";
}

fused_bn_route fused_batch_norm_route(const profile& p) {
  const bool ex_outside_fp16 = p.backend.fused_batch_norm == fused_bn_route::ex && p.train.amp != amp_mode::fp16;
  return ex_outside_fp16 ? fused_bn_route::automatic : p.backend.fused_batch_norm;
}

bool grad_scaler_enabled(const train_config& t) {
  if (t.grad_scaler == switch_mode::automatic) return t.amp == amp_mode::fp16;
  return t.grad_scaler == switch_mode::on;
}

std::string report_path_for(const profile& p, bool bench_data) {
  const std::string path = replace_all(p.report.path, "{name}", p.name);
  if (!bench_data) return path;
  const std::filesystem::path f(path);
  return (f.parent_path() / (f.stem().string() + ".bench-data" + f.extension().string())).string();
}

}  // namespace trainbench
