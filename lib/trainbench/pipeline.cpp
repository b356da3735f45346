#include "trainbench/pipeline.hpp"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <torch/cuda.h>

#include <algorithm>
#include <thread>

#include "trainbench/config/effective_rules.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/model/batch_norm_op.hpp"
#include "trainbench/model/conv_fusion_op.hpp"
#include "trainbench/model/fusion.hpp"
#include "trainbench/stages/weights.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {

bool cuda_runtime_available() { return torch::cuda::is_available(); }

c10::Device resolve_device(const std::string& text) {
  if (text == "cpu") return c10::kCPU;
  if (text == "auto") return cuda_runtime_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  if (!cuda_runtime_available())
    throw config_error("", "device", "'" + text + "' asked for, but no CUDA device is available here");
  const int index = text == "cuda" ? 0 : std::stoi(text.substr(5));
  if (index >= static_cast<int>(torch::cuda::device_count()))
    throw config_error(
        "", "device",
        "'" + text + "': only " + std::to_string(torch::cuda::device_count()) + " CUDA device(s) present");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

namespace {

// backend.compile runs in parts; one that cannot run here is a note of its own. Not "requested
// but ineffective" (that is a switch with no effect at all, which --strict refuses and the ladder
// marks): the rest of the switch still runs.
std::string compile_part_not_run(const std::string& part, const std::string& why) {
  return "backend.compile: " + part + " not run here: " + why;
}

// backend.compile lays the whole run out in NHWC, whatever model.channels_last says: the loader,
// the device preprocessing, the graph's static inputs and the weights all follow that key.
profile with_compile_layout(const profile& requested) {
  profile p = requested;
  if (p.backend.compile) p.model.channels_last = true;
  return p;
}

std::string ineffective_note(const ineffective_switch& s) { return s.key + ": requested but ineffective: " + s.why; }

// Switches that cannot take effect on this device become notes (or errors with --strict). With
// data.decode: device the rules assume nvJPEG decodes; device_decoder() judges again if it cannot.
void note_ineffective(const profile& p, bool on_cuda, bool strict, effective_settings& e) {
  for (const auto& s : ineffective_switches(p, device_kind{on_cuda, e.device, true})) {
    if (strict) throw config_error("", s.key, "has no effect here (" + s.why + ") and --strict was given");
    e.notes.push_back(ineffective_note(s));
  }
  // Not ineffective as a whole: its layout and fused optimizer run on any device.
  if (!on_cuda && p.backend.compile) {
    e.notes.push_back(
        compile_part_not_run("cuda_graph", "the device is " + e.device + "; a CUDA graph needs a CUDA device"));
  }
  // Not ineffective (it runs, and --strict allows it), but rarely what anyone wants measured.
  if (!on_cuda && p.train.amp == amp_mode::fp16)
    e.notes.push_back(
        "train.amp: fp16 on a CPU: most CPUs have no fast fp16 kernels, so autocast runs many times slower than "
        "fp32, and the loss scaler skips steps while it backs off; bf16 is the CPU's mixed precision");
}

// nvJPEG cannot run on this CUDA device, so the host decodes: the notes made for a device decode
// give way to those of a host-decoded folder (only without --strict: data.decode stops it first).
void rejudge_for_host_decode(const profile& p, effective_settings& e) {
  const auto assumed = ineffective_switches(p, device_kind{true, e.device, true});
  const auto actual = ineffective_switches(p, device_kind{true, e.device, false});
  auto holds = [](const std::vector<ineffective_switch>& v, const ineffective_switch& s) {
    return std::any_of(v.begin(), v.end(),
                       [&](const ineffective_switch& x) { return x.key == s.key && x.why == s.why; });
  };
  for (const auto& s : assumed)
    if (!holds(actual, s))
      e.notes.erase(std::remove(e.notes.begin(), e.notes.end(), ineffective_note(s)), e.notes.end());
  for (const auto& s : actual)
    if (!holds(assumed, s)) e.notes.push_back(ineffective_note(s));
}

void choose_threads(const profile& p, bool on_cuda, int local_world, effective_settings& e) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (p.threads > 0) {
    at::set_num_threads(p.threads);
  } else if (local_world > 1) {
    // Ranks on one node share its cores; LibTorch's default (all cores each) would oversubscribe.
    at::set_num_threads(static_cast<int>(std::max(1u, cores / static_cast<unsigned>(local_world))));
  }
  e.intra_op_threads = at::get_num_threads();
  // On a GPU run the intra-op pool is mostly idle, so only a CPU run really competes.
  const unsigned wanted = static_cast<unsigned>((e.intra_op_threads + p.data.workers) * local_world);
  if (!on_cuda && wanted > cores) {
    e.notes.push_back(
        "threads: " + std::to_string(e.intra_op_threads) + " intra-op + " + std::to_string(p.data.workers) +
        " loader workers" + (local_world > 1 ? " per rank, " + std::to_string(local_world) + " ranks" : std::string()) +
        " on " + std::to_string(cores) + " cores: they compete for the CPU (set 'threads' to share the cores)");
  }
}

// The dtype of the batches the device decode writes: under autocast its dtype, which the first
// convolution would cast a float batch to anyway.
at::ScalarType decoded_dtype(const profile& p) {
  return p.train.amp == amp_mode::off ? at::kFloat : amp_dtype(p.train.amp);
}

// data.decode: device where nvJPEG can run here; otherwise the host decodes, and the report says
// so as an ineffective switch (an error with --strict).
std::unique_ptr<transfer_stage> device_decoder(const profile& p, c10::Device device, bool strict,
                                               effective_settings& e) {
  if (p.data.source != data_source::imagefolder || p.data.decode != decode_place::device) return nullptr;
  std::string why;
  std::unique_ptr<transfer_stage> stage;
  if (!device.is_cuda()) {
    why = "the device is " + e.device + "; nvJPEG needs a CUDA device";
  } else {
    nvjpeg_options no;
    no.image_size = p.data.image_size;
    no.mean = p.data.normalize.mean;
    no.std = p.data.normalize.std;
    no.channels_last = p.model.channels_last;
    no.dtype = decoded_dtype(p);
    no.copy_stream = p.transfer.copy_stream;
    no.regions = p.data.partial_decode;
    no.off_engines_on_workers = p.data.decode_off_engines == decode_place::host;
    if (no.off_engines_on_workers) no.device_share = p.data.device_decode_share;
    no.max_image_pixels = p.data.max_image_pixels;
    no.skip_bad_files = p.data.on_bad_file == bad_file_policy::skip;
    stage = make_nvjpeg_transfer(device, no, why);
  }
  if (stage) return stage;  // its switches were judged by note_ineffective()
  const std::string message = why + "; decoded on the host (libjpeg-turbo) instead";
  if (strict)
    throw config_error("", "data.decode", "'device' has no effect here (" + message + ") and --strict was given");
  e.notes.push_back("data.decode: requested but ineffective: " + message);
  if (device.is_cuda()) rejudge_for_host_decode(p, e);
  return nullptr;
}

std::unique_ptr<batch_loader> make_loader(const profile& p, const build_options& o, bool pin, bool encoded,
                                          std::int64_t batch, load_sink* trace, effective_settings& e) {
  std::shared_ptr<const dataset> data;
  try {
    data = open_dataset(p.data, p.model.num_classes, p.seed);
  } catch (const dataset_missing& missing) {  // absent files only: a corrupt one always fails
    if (p.data.fallback != data_fallback::synthetic) throw;
    // Asked for explicitly by the profile, and said loudly: the numbers are not for this dataset.
    e.notes.push_back(std::string("data.source: ") + to_string(p.data.source) + " unavailable (" + missing.what() +
                      "); data.fallback: synthetic, so this run used synthetic images");
    data = make_synthetic(p.data.samples, p.data.source_size, 3, p.model.num_classes, p.seed);
  }
  e.dataset = data->describe();
  if (data->files()) e.decode = "host";
  loader_options lo;
  lo.batch_size = static_cast<int>(batch);
  lo.workers = p.data.workers;
  lo.prefetch_factor = p.data.prefetch_factor;
  lo.pin_memory = pin;
  lo.shuffle = p.data.shuffle;
  lo.drop_last = p.data.drop_last;
  lo.channels_last = p.model.channels_last;
  lo.raw_uint8 = p.data.preprocess == preprocess_place::device;
  lo.image_size = p.data.image_size;
  lo.mean = p.data.normalize.mean;
  lo.std = p.data.normalize.std;
  lo.seed = p.seed;
  lo.rank = o.launch.rank;
  lo.world = o.launch.world;
  lo.folder.transform = p.data.transform;
  lo.folder.max_image_pixels = p.data.max_image_pixels;
  lo.folder.max_image_bytes = p.data.max_image_bytes;
  lo.folder.skip_bad_files = p.data.on_bad_file == bad_file_policy::skip;
  lo.folder.partial_decode = p.data.partial_decode;
  lo.encoded = encoded && data->files();
  lo.folder.decode_off_engines = lo.encoded && p.data.decode_off_engines == decode_place::host;
  if (lo.folder.decode_off_engines) lo.folder.device_share = p.data.device_decode_share;
  // data.decode: device: pinned memory holds the compressed files (the labels besides).
  if (lo.encoded && pin) lo.file_ring_bytes = batch_loader::file_ring_size(lo);
  lo.trace = trace;
  auto loader = std::make_unique<batch_loader>(std::move(data), lo);
  e.loader_workers = loader->workers();
  e.loader_slots = loader->slots();
  e.pinned_memory = loader->pinned();
  return loader;
}

device_batch make_device_synthetic(const profile& p, c10::Device device, std::int64_t batch, at::ScalarType dtype) {
  auto opts = at::TensorOptions().device(device);
  const std::int64_t s = p.data.image_size;
  at::Tensor images = at::randn({batch, 3, s, s}, opts).to(dtype);
  if (p.model.channels_last) images = images.contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor labels = at::randint(p.model.num_classes, {batch}, opts.dtype(at::kLong));
  return {images, labels, 0, batch};
}

resnet make_model(const profile& p, c10::Device device, effective_settings& e) {
  resnet model = make_resnet(p.model.arch, p.model.num_classes, p.model.zero_init_residual);
  if (!p.model.weights.empty()) load_weights(*model, p.model.weights);
  model->to(device);
  if (p.model.channels_last) weights_to_channels_last(*model);  // before the optimizer sees them
  model->train();
  e.channels_last = p.model.channels_last;
  return model;
}

step_options make_step_options(const profile& p, c10::Device device) {
  step_options so;
  so.device = device;
  so.amp = p.train.amp;
  so.scaler = grad_scaler_enabled(p.train);
  so.accumulation = p.train.grad_accumulation;
  so.optimizer = p.train.optimizer;
  so.fused_sgd = p.backend.compile;
  return so;
}

// backend.pad_stem runs where the rules find it effective: the model, and the search sizing it.
bool pads_stem(const profile& p, bool on_cuda, const std::string& device) {
  return p.backend.pad_stem && takes_effect(p, device_kind{on_cuda, device, true}, "backend.pad_stem");
}

// backend.compile's batch norms, as the run and the batch-size search fuse them.
fusion_request compile_fusion_request(const profile& p, c10::Device device) {
  fusion_request fr;
  fr.device = device;
  fr.amp = p.train.amp;
  fr.channels_last = true;
  fr.route = fused_batch_norm_route(p);
  return fr;
}

// backend.conv_fusion, on top of the batch norms backend.compile fused: what ran in
// effective.conv_fusion, each shape or reason it could not in the notes.
void fuse_conv_pairs(const profile& p, c10::Device device, const std::vector<std::int64_t>& shape, resnet& model,
                     effective_settings& e) {
  fusion_request fr;
  fr.device = device;
  fr.amp = p.train.amp;
  fr.channels_last = p.model.channels_last;
  fr.input_shape = shape;
  const fusion_outcome fused = fuse_convolutions(model, fr);
  e.conv_fusion = fused.applied;
  for (const auto& f : fused.ineffective) e.notes.push_back("backend.conv_fusion: " + f);
}

// The search sizes the step the run will take: with a graph only where the run captures one.
batch_search_request search_request(const profile& p, c10::Device device, bool graph) {
  batch_search_request r;
  r.device = device;
  r.arch = p.model.arch;
  r.num_classes = p.model.num_classes;
  r.image_size = p.data.image_size;
  r.channels_last = p.model.channels_last;
  r.cuda_graph = graph;
  r.pad_stem = pads_stem(p, true, device.str());
  r.input_buffers = p.transfer.copy_stream ? p.transfer.depth : 1;
  // data.preprocess: device makes each float batch on the device through a resized and a
  // normalised copy, in the allocator's ordinary pool, beside a graph's own: two batches more.
  if (p.data.preprocess == preprocess_place::device) r.input_buffers += 2;
  r.step = make_step_options(p, device);
  if (p.backend.compile) r.fusion = compile_fusion_request(p, device);
  return r;
}

// Whether this run joins a process group. A launcher without dist.backend would start W copies
// that each write the same report; a dist.backend without a launcher has no one to talk to.
bool data_parallel(const profile& p, const launch_info& l, bool strict, effective_settings& e) {
  if (p.dist.backend == dist_backend::none) {
    if (l.world > 1)
      throw config_error("", "dist.backend",
                         "'none', but " + l.launcher + " started this process as rank " + std::to_string(l.rank) +
                             " of " + std::to_string(l.world) + "; set dist.backend: auto (or gloo / nccl)");
    return false;
  }
  if (l.launcher == "none") {
    const std::string why =
        "no launcher environment (RANK and WORLD_SIZE from torchrun, or Slurm's SLURM_PROCID and SLURM_NTASKS)";
    if (strict) throw config_error("", "dist.backend", "has no effect here (" + why + ") and --strict was given");
    e.notes.push_back("dist.backend: requested but ineffective: " + why + "; ran as one process");
    return false;
  }
  return true;
}

// The windows, collectives and shards are counted from the profile: every rank must run the same.
void check_same_profile(process_group& group, const profile& p) {
  const std::string hash = profile_hash(p);
  std::vector<double> mine;
  for (std::size_t i = 0; i + 4 <= hash.size(); i += 4) mine.push_back(std::stoi(hash.substr(i, 4), nullptr, 16));
  const auto all = group.all_gather(mine);
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0])
      throw config_error("", "dist",
                         "rank " + std::to_string(r) + " runs a different profile than rank 0 (hash " +
                             "mismatch): every rank must get the same profile and --set options");
}

// torchrun and srun start one process per GPU: `auto` and `cuda` mean this node's LOCAL_RANK-th GPU.
c10::Device device_for_rank(const profile& p, const launch_info& l) {
  c10::Device device = resolve_device(p.device);
  if (!device.is_cuda() || p.dist.backend == dist_backend::none || l.launcher == "none") return device;
  if (p.device != "auto" && p.device != "cuda") return device;
  if (l.local_rank >= static_cast<int>(torch::cuda::device_count()))
    throw config_error("", "device",
                       "local rank " + std::to_string(l.local_rank) + " has no GPU of its own (" +
                           std::to_string(torch::cuda::device_count()) + " visible)");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(l.local_rank));
}

// measure.trace: one file per rank where the path has {rank}, else rank 0's only (as the report).
std::unique_ptr<trace_recorder> make_trace(const profile& p, const launch_info& l, std::int64_t batch) {
  if (p.measure.trace.empty()) return nullptr;
  const bool per_rank = p.measure.trace.find("{rank}") != std::string::npos;
  if (l.rank != 0 && !per_rank) return nullptr;
  trace_options t;
  t.path = replace_all(p.measure.trace, "{rank}", std::to_string(l.rank));
  t.rank = l.rank;
  t.label = l.world > 1 ? p.name + " (rank " + std::to_string(l.rank) + ")" : p.name;
  const bool host_data = p.data.source != data_source::device_synthetic;
  t.workers = host_data ? p.data.workers : 0;
  loader_options lo;
  lo.workers = p.data.workers;
  lo.prefetch_factor = p.data.prefetch_factor;
  t.ring_slots = batch_loader::ring_slots(lo);
  t.measured_batches = p.measure.measured_batches;
  t.batch_size = batch;
  t.image_phases = p.data.source == data_source::imagefolder;
  return std::make_unique<trace_recorder>(t);
}

}  // namespace

pipeline build_pipeline(const profile& requested, const build_options& o, effective_settings& e,
                        std::int64_t& parameters) {
  const profile p = with_compile_layout(requested);
  const c10::Device device = device_for_rank(p, o.launch);
  const bool on_cuda = device.is_cuda();
  if (on_cuda) make_device_current(device);  // before anything allocates, pins or syncs
  // Before the process group's and loader's threads.
  if (p.backend.compile || p.backend.conv_fusion) prepare_fusions(device);
  e.device = device.str();
  e.device_name = on_cuda ? cuda_device_name(device) : "cpu";
  note_ineffective(p, on_cuda, o.strict, e);
  choose_threads(p, on_cuda, o.launch.local_world, e);
  at::manual_seed(p.seed);
  if (on_cuda) {
    // Legacy setters only: mixing them with the newer precision API makes the getters throw.
    at::globalContext().setBenchmarkCuDNN(p.backend.cudnn_benchmark);
    at::globalContext().setAllowTF32CuBLAS(p.backend.tf32);
    at::globalContext().setAllowTF32CuDNN(p.backend.tf32);
    e.cudnn_benchmark = p.backend.cudnn_benchmark;
    e.tf32 = p.backend.tf32;
  }
  pipeline out;
  if (data_parallel(p, o.launch, o.strict, e)) out.group = std::make_unique<process_group>(o.launch, p.dist, device);
  if (out.group) check_same_profile(*out.group, p);
  if (out.group && on_cuda && (p.backend.cuda_graph || p.backend.compile)) {
    const std::string why = "the gradient all-reduce runs from autograd hooks, which a captured graph does not replay";
    if (p.backend.cuda_graph) {
      if (o.strict)
        throw config_error("", "backend.cuda_graph", "has no effect here (" + why + ") and --strict was given");
      e.notes.push_back("backend.cuda_graph: requested but ineffective: " + why);
    }
    if (p.backend.compile) e.notes.push_back(compile_part_not_run("cuda_graph", why));
  }
  // A data-parallel run captures no graph: its all-reduce runs from autograd hooks (above).
  const bool graph = on_cuda && (p.backend.cuda_graph || p.backend.compile) && !out.group;
  std::int64_t batch = p.train.batch_size;
  if (p.train.batch_size_auto) {
    if (!on_cuda)
      throw config_error(
          "", "train.batch_size",
          "'auto' searches the largest batch that fits in device memory and needs a CUDA device; give a number");
    batch = search_batch_size(search_request(p, device, graph), e.batch_size_search);
  }

  out.batch_size = batch;
  e.batch_size = batch;
  out.trace = make_trace(p, o.launch, batch);
  const bool host_data = p.data.source != data_source::device_synthetic;
  at::ScalarType batch_dtype = at::kFloat;
  if (host_data) {
    std::unique_ptr<transfer_stage> decoder = device_decoder(p, device, o.strict, e);
    out.loader = make_loader(p, o, on_cuda && p.data.pin_memory, decoder != nullptr, batch, out.trace.get(), e);
    if (decoder && out.loader->encoded()) {
      out.transfer = std::move(decoder);
      e.decode = "device";
      batch_dtype = decoded_dtype(p);
    } else {
      out.transfer = on_cuda ? make_cuda_transfer(device, p.transfer, e.pinned_memory) : make_passthrough_transfer();
    }
    e.transfer = out.transfer->describe();
    e.non_blocking = on_cuda && (p.transfer.non_blocking || p.transfer.copy_stream) && e.pinned_memory;
    e.copy_stream = on_cuda && p.transfer.copy_stream;
    if (p.data.preprocess == preprocess_place::device) {
      out.preprocess = std::make_unique<device_preprocess>(p.data.image_size, p.data.normalize.mean,
                                                           p.data.normalize.std, p.model.channels_last, device);
      e.preprocess = "device";
    }
  } else {
    if (o.synthetic_as_decoded) batch_dtype = decoded_dtype(p);
    out.fixed = make_device_synthetic(p, device, batch, batch_dtype);
    e.transfer = "none (device-synthetic: one batch made on the device, reused)";
    e.dataset = "device-synthetic";
  }
  if (o.with_step) {
    resnet model = make_model(p, device, e);
    parameters = parameter_count(*model);
    if (pads_stem(p, on_cuda, e.device)) {
      model->set_stem_padded(true);
      e.pad_stem = true;
    }
    const std::vector<std::int64_t> shape{batch, 3, p.data.image_size, p.data.image_size};
    bool pytorch_batch_norms = true;  // some batch norm runs PyTorch's own, not a fused one
    if (p.backend.compile) {
      // In the order a step meets them; the graph is added below once it is built.
      e.compile.push_back("channels_last");
      fusion_request fr = compile_fusion_request(p, device);
      fr.input_shape = shape;
      const fusion_outcome fused = fuse_batch_norm(model, fr);
      for (const auto& f : fused.applied) e.compile.push_back(f);
      for (const auto& f : fused.ineffective) e.notes.push_back("backend.compile: " + f);
      e.compile.push_back("fused_sgd");
      pytorch_batch_norms = !fused.ineffective.empty();
    }
    if (p.backend.conv_fusion && takes_effect(p, device_kind{on_cuda, e.device, true}, "backend.conv_fusion"))
      fuse_conv_pairs(p, device, shape, model, e);
    if (on_cuda && p.train.amp == amp_mode::bf16 && pytorch_batch_norms) {
      const std::string note = bf16_batch_norm_note(device, p.model.channels_last);
      if (!note.empty()) e.notes.push_back(note);
    }
    if (out.group) {
      // Every rank starts from rank 0's weights (and batch-norm statistics), as DDP does.
      std::vector<at::Tensor> state = model->parameters();
      for (auto& b : model->buffers()) state.push_back(b);
      out.group->broadcast_from_rank0(state);
      out.sync =
          std::make_unique<grad_sync>(model->parameters(), *out.group, p.dist.bucket_mb, p.train.grad_accumulation);
    }
    step_options so = make_step_options(p, device);
    so.input_dtype = batch_dtype;
    e.amp = to_string(p.train.amp);
    e.grad_scaler = so.scaler;
    out.step = graph ? make_graph_step(std::move(model), so, shape, p.model.channels_last)
                     : make_eager_step(std::move(model), so);
    e.cuda_graph = graph;
    if (p.backend.compile && graph) e.compile.push_back("cuda_graph");
    if (graph && !host_data) {
      // The reused batch lives in the graph's static inputs, so the ceiling copies nothing.
      auto [images, labels] = out.step->static_inputs();
      images.copy_(out.fixed.images);
      labels.copy_(out.fixed.labels);
      out.fixed.images = images;
      out.fixed.labels = labels;
    }
    if (graph && out.transfer && !out.preprocess) {
      auto [images, labels] = out.step->static_inputs();
      out.transfer->set_destination(images, labels);
      e.transfer = out.transfer->describe();
    }
    e.step = out.step->describe();
  }
  if (o.with_step && p.measure.kernel_families) {
    // Told apart by name, the per-parameter SGD's kernels are ATen's elementwise ones.
    if (!p.backend.compile && !p.train.optimizer.foreach)
      out.kernels_caveat =
          "the per-parameter SGD runs ATen's elementwise kernels, so its adds count in norm_activation and its "
          "multiplies in other, not in optimizer (optimizer.foreach or backend.compile gives it its own)";
    if (!on_cuda)
      out.kernels_not_measured =
          "the device is " + e.device +
          ": CPU ops nest and share the intra-op threads, so their host times do not add up to the step; the "
          "families are read from the profiler's CUDA kernel records";
    else if (out.group)
      out.kernels_not_measured =
          "a data-parallel run: a profiled window on its own would leave the other ranks waiting in all-reduces";
    else
      out.kernels = make_kineto_recorder(device.index());
  }
  out.clock = on_cuda ? make_cuda_clock(device, out.transfer.get()) : make_host_clock();
  out.probe = on_cuda ? make_cuda_probe(device) : std::make_unique<device_probe>();
  e.clock = out.clock->kind();
  if (out.trace) {
    out.clock->keep_spans(true);
    out.trace->watch(out.probe.get());
    if (out.transfer) out.trace->set_lookahead(out.transfer->lookahead());
  }
  return out;
}

}  // namespace trainbench
