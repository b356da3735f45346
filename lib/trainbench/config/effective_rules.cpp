#include "trainbench/config/effective_rules.hpp"

#include <algorithm>

namespace trainbench {

std::vector<ineffective_switch> ineffective_switches(const profile& p, const device_kind& device) {
  std::vector<ineffective_switch> out;
  auto ineffective = [&](bool requested, const char* key, const std::string& why) {
    if (requested) out.push_back({key, why});
  };
  const bool folder = p.data.source == data_source::imagefolder;
  if (!device.cuda) {
    const std::string why = "the device is " + device.name + "; it needs a CUDA device";
    ineffective(p.data.pin_memory, "data.pin_memory", why);
    ineffective(p.transfer.non_blocking, "transfer.non_blocking", why);
    ineffective(p.transfer.copy_stream, "transfer.copy_stream", why);
    ineffective(p.backend.cuda_graph, "backend.cuda_graph", why);
    ineffective(p.backend.cudnn_benchmark, "backend.cudnn_benchmark", why);
    ineffective(p.backend.tf32, "backend.tf32", why);
    ineffective(p.backend.pad_stem, "backend.pad_stem", why);
    ineffective(p.backend.conv_fusion, "backend.conv_fusion", why);
  } else if (folder && p.data.decode == decode_place::device && device.device_decode) {
    // nvJPEG decodes on the device: the transfer is the decode. With a copy stream it runs one
    // batch ahead on a side stream; data.pin_memory puts the file bytes in the pinned file ring.
    // From pageable memory their copies block the host, which then cannot run ahead.
    ineffective(p.transfer.non_blocking && !p.transfer.copy_stream, "transfer.non_blocking",
                "with data.decode: device the decode runs on the compute stream; transfer.copy_stream moves it aside");
    ineffective(p.transfer.copy_stream && !p.data.pin_memory, "transfer.copy_stream",
                "nvJPEG's copies of file bytes in pageable memory block the host until done, so the decode "
                "cannot run ahead; set data.pin_memory: true (the pinned file ring)");
  } else {
    const bool no_host_data = p.data.source == data_source::device_synthetic;
    ineffective(no_host_data && p.data.pin_memory, "data.pin_memory", "device-synthetic data never leaves the device");
    ineffective(no_host_data && (p.transfer.non_blocking || p.transfer.copy_stream), "transfer",
                "device-synthetic data is not transferred");
    ineffective(!no_host_data && p.transfer.non_blocking && !p.data.pin_memory && !p.transfer.copy_stream,
                "transfer.non_blocking", "a copy from pageable memory is synchronous; set data.pin_memory: true");
    ineffective(
        !no_host_data && p.transfer.copy_stream && !p.data.pin_memory, "transfer.copy_stream",
        "copies from pageable memory block the host until done, so nothing overlaps; set data.pin_memory: true");
  }
  ineffective(p.data.workers > 0 && p.data.source == data_source::device_synthetic, "data.workers",
              "device-synthetic data has no loader");
  ineffective(p.model.zero_init_residual && !p.model.weights.empty(), "model.zero_init_residual",
              "model.weights replaces the initial weights");
  ineffective(
      !folder && p.data.transform == data_transform::eval, "data.transform",
      std::string(to_string(p.data.source)) + " images are resized whole; eval's crop is for data.source: imagefolder");
  ineffective(!folder && p.data.on_bad_file == bad_file_policy::skip, "data.on_bad_file",
              "only data.source: imagefolder reads one file per sample");
  // backend.fused_batch_norm picks among cuDNN's fusions, which run only where backend.compile runs
  // them: on CUDA; trainbench takes the Ex call for fp16 activations only.
  const bool route = p.backend.fused_batch_norm != fused_bn_route::automatic;
  if (!p.backend.compile)
    ineffective(route, "backend.fused_batch_norm",
                "it chooses how backend.compile fuses batch norm, and backend.compile is off");
  else if (!device.cuda)
    ineffective(route, "backend.fused_batch_norm",
                "the device is " + device.name + "; cuDNN's fusions need a CUDA device");
  else
    ineffective(p.backend.fused_batch_norm == fused_bn_route::ex && p.train.amp != amp_mode::fp16,
                "backend.fused_batch_norm",
                std::string("trainbench takes cuDNN's batch-norm Ex call for fp16 activations only (train.amp: ") +
                    to_string(p.train.amp) + ")");
  if (device.cuda) {
    // The stem is padded for cuDNN's tensor-core NHWC kernels (NVIDIA: channels a multiple of 8 in
    // fp16, of 4 in TF32, 4 enough at stride 2); in NCHW cuDNN pads the input itself.
    ineffective(p.backend.pad_stem && !p.model.channels_last && !p.backend.compile, "backend.pad_stem",
                "the 4th channel is for cuDNN's NHWC kernels; set model.channels_last (or backend.compile)");
    ineffective(p.backend.pad_stem && p.train.amp == amp_mode::off && !p.backend.tf32, "backend.pad_stem",
                "the 4th channel is for cuDNN's tensor-core kernels, and fp32 without TF32 runs none; set "
                "train.amp (fp16, bf16) or backend.tf32");
    ineffective(p.backend.conv_fusion && !p.model.channels_last && !p.backend.compile, "backend.conv_fusion",
                "cuDNN's convolution fusions run NHWC only; set model.channels_last (or backend.compile)");
  }
  const bool nvjpeg = folder && p.data.decode == decode_place::device && device.cuda && device.device_decode;
  ineffective(!nvjpeg && p.data.decode_off_engines == decode_place::device, "data.decode_off_engines",
              "it chooses where nvJPEG's misses are decoded, and nvJPEG does not decode here (data.decode: device on "
              "a CUDA device with libnvjpeg)");
  const bool shared = p.data.device_decode_share < 1;
  if (!nvjpeg)
    ineffective(shared, "data.device_decode_share",
                "it splits each batch between nvJPEG and the loader's workers, and nvJPEG does not decode here "
                "(data.decode: device on a CUDA device with libnvjpeg)");
  else
    ineffective(shared && p.data.decode_off_engines == decode_place::device, "data.device_decode_share",
                "the loader's workers decode for the device only with data.decode_off_engines: host");
  return out;
}

bool takes_effect(const profile& p, const device_kind& device, const std::string& key) {
  const auto all = ineffective_switches(p, device);
  return std::none_of(all.begin(), all.end(), [&](const ineffective_switch& s) { return s.key == key; });
}

}  // namespace trainbench
