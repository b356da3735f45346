#include "trainbench/config/profile_io.hpp"

#include <cstdio>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "trainbench/config/bounds.hpp"
#include "trainbench/config/yaml_source.hpp"
#include "trainbench/model/resnet_spec.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {
namespace fs = std::filesystem;

namespace {

// Where each key of the merged tree came from, so errors can point at the right file and line.
struct origin {
  std::string file;
  int line = -1;
  int column = -1;
  std::string text() const {
    if (line < 0) return file;
    return file + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1);
  }
};
using origin_map = std::map<std::string, origin>;

std::string child_key(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

void record_origins(const YAML::Node& node, const std::string& prefix, const std::string& file, origin_map& out) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    std::string key = child_key(prefix, it->first.Scalar());
    auto mark = it->first.Mark();
    out[key] = origin{file, mark.line, mark.column};
    if (it->second.IsMap()) record_origins(it->second, key, file, out);
  }
}

// Maps merge key by key, the overlay wins; anything else (scalars, lists) is replaced.
YAML::Node merge(const YAML::Node& base, const YAML::Node& overlay) {
  if (!base.IsMap() || !overlay.IsMap()) return YAML::Clone(overlay);
  YAML::Node out = YAML::Clone(base);
  for (auto it = overlay.begin(); it != overlay.end(); ++it) {
    const std::string key = it->first.Scalar();
    out[key] = out[key] ? merge(out[key], it->second) : YAML::Clone(it->second);
  }
  return out;
}

YAML::Node load_chain(const fs::path& file, const origin& referrer, std::vector<std::string>& chain,
                      origin_map& origins) {
  YAML::Node node = parse_yaml_file(file, referrer.text(), referrer.line < 0 ? "" : "extends");
  const std::string canonical = fs::weakly_canonical(file).string();
  for (const auto& seen : chain) {
    if (seen == canonical) {
      throw config_error(referrer.text(), "extends", "'extends' cycle: " + join(chain, " -> ") + " -> " + canonical);
    }
  }
  chain.push_back(canonical);
  if (node.IsNull()) node = YAML::Node(YAML::NodeType::Map);
  if (!node.IsMap()) throw config_error(file.string(), "", "the top level of a profile must be a mapping");

  YAML::Node base(YAML::NodeType::Map);
  if (YAML::Node ext = node["extends"]) {
    auto mark = ext.Mark();
    origin here{file.string(), mark.line, mark.column};
    if (!ext.IsScalar() || ext.Scalar().empty())
      throw config_error(here.text(), "extends", "expected a file path relative to this profile");
    base = load_chain(file.parent_path() / ext.Scalar(), here, chain, origins);
    node.remove("extends");
  }
  record_origins(node, "", file.string(), origins);
  return merge(base, node);
}

void apply_set(YAML::Node& root, const std::string& assignment, origin_map& origins) {
  const auto eq = assignment.find('=');
  const std::string where = "--set " + assignment;
  if (eq == std::string::npos || eq == 0) throw config_error(where, "", "expected key.path=value");
  const std::string key = assignment.substr(0, eq);
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw config_error(where, key, "value is not valid YAML: " + e.msg);
  }
  if (auto d = find_duplicate_key(value, key)) throw config_error(where, d->path, duplicate_message(*d));
  const auto parts = split(key, '.');
  YAML::Node overlay = value;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (it->empty()) throw config_error(where, key, "empty component in key path");
    YAML::Node wrap(YAML::NodeType::Map);
    wrap[*it] = overlay;
    overlay = wrap;
  }
  root = merge(root, overlay);
  // The blocks above the key too, where no file wrote them: an unknown block in a --set
  // (train.optimiser.lr) is then blamed on the --set.
  std::string prefix;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix += (i ? "." : "") + parts[i];
    origins.emplace(prefix, origin{where, -1, -1});
  }
  origins[key] = origin{where, -1, -1};
  if (value.IsMap()) {
    origin_map inner;
    record_origins(value, key, where, inner);
    for (auto& [k, o] : inner) origins[k] = origin{where, -1, -1};
  }
}

std::string format_double(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  // YAML 1.1 readers (PyYAML, which the Python reference uses) take a float only with a '.'
  // in the mantissa: "1e-05" would come back as a string, "1.0e-05" as 1e-05.
  const std::size_t exponent = s.find_first_of("eE");
  const std::size_t mantissa_end = exponent == std::string::npos ? s.size() : exponent;
  if (s.find_first_of(".n") == std::string::npos) s.insert(mantissa_end, ".0");
  return s;
}

// Reads the merged tree into the structs; knows every key, so it also rejects unknown ones.
class reader {
 public:
  reader(const YAML::Node& root, const origin_map& origins, std::string top_file)
      : origins_(origins), top_file_(std::move(top_file)) {
    stack_.push_back({root, ""});
  }

  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    auto it = origins_.find(key);
    throw config_error(it == origins_.end() ? top_file_ : it->second.text(), key, message);
  }

  template <class F>
  void block(const char* key, F&& body) {
    const std::string path = child_key(stack_.back().prefix, key);
    known_.insert(path);
    YAML::Node node = stack_.back().node[key];
    if (!node || node.IsNull()) {
      stack_.push_back({YAML::Node(YAML::NodeType::Map), path});
    } else {
      if (!node.IsMap()) fail(path, "expected a mapping of keys");
      stack_.push_back({node, path});
    }
    body();
    check_unknown();
    stack_.pop_back();
  }

  void finish() { check_unknown(); }

  template <class T>
  void field(const char* key, T& value) {
    YAML::Node node = get(key);
    if (!node) return;
    if (!node.IsScalar()) fail(path_of(key), std::string("expected ") + type_name<T>());
    try {
      value = node.as<T>();
    } catch (const YAML::Exception&) {
      fail(path_of(key), std::string("expected ") + type_name<T>() + ", got '" + node.Scalar() + "'");
    }
  }

  void nullable(const char* key, std::string& value) {
    YAML::Node node = get(key);
    if (!node) return;
    if (node.IsNull()) {
      value.clear();
      return;
    }
    field(key, value);
  }

  template <class E>
  void choice(const char* key, E& value, std::initializer_list<E> allowed) {
    YAML::Node node = get(key);
    if (!node) return;
    std::vector<std::string> names;
    for (E e : allowed) names.push_back(to_string(e));
    const std::string text = node.IsScalar() ? node.Scalar() : std::string();
    for (E e : allowed) {
      if (text == to_string(e)) {
        value = e;
        return;
      }
    }
    fail(path_of(key), "unknown value '" + text + "'; allowed: " + join(names, ", "));
  }

  void numbers(const char* key, std::vector<double>& value) {
    YAML::Node node = get(key);
    if (!node) return;
    if (!node.IsSequence()) fail(path_of(key), "expected a list of numbers, e.g. [0.5, 0.5, 0.5]");
    value.clear();
    for (const auto& item : node) {
      try {
        value.push_back(item.as<double>());
      } catch (const YAML::Exception&) {
        fail(path_of(key), "expected a list of numbers");
      }
    }
  }

  void batch_size(const char* key, int& value, bool& is_auto) {
    YAML::Node node = get(key);
    if (!node) return;
    if (node.IsScalar() && node.Scalar() == "auto") {
      is_auto = true;
      return;
    }
    is_auto = false;
    field(key, value);
  }

 private:
  struct frame {
    YAML::Node node;
    std::string prefix;
  };

  std::string path_of(const char* key) const { return child_key(stack_.back().prefix, key); }

  YAML::Node get(const char* key) {
    known_.insert(path_of(key));
    return stack_.back().node[key];
  }

  void check_unknown() const {
    const frame& f = stack_.back();
    std::vector<std::string> siblings;
    for (const auto& k : known_) {
      if (k.rfind(f.prefix.empty() ? "" : f.prefix + ".", 0) == 0) {
        std::string rest = f.prefix.empty() ? k : k.substr(f.prefix.size() + 1);
        if (rest.find('.') == std::string::npos) siblings.push_back(rest);
      }
    }
    for (auto it = f.node.begin(); it != f.node.end(); ++it) {
      const std::string key = it->first.Scalar();
      const std::string path = child_key(f.prefix, key);
      if (known_.count(path)) continue;
      std::string hint = closest_match(key, siblings);
      fail(path, "unknown key" + (hint.empty() ? std::string() : "; did you mean '" + hint + "'?"));
    }
  }

  template <class T>
  static const char* type_name() {
    if (std::is_same<T, bool>::value) return "true or false";
    if (std::is_integral<T>::value) return "an integer";
    if (std::is_floating_point<T>::value) return "a number";
    return "a string";
  }

  const origin_map& origins_;
  std::string top_file_;
  std::vector<frame> stack_;
  std::set<std::string> known_;
};

// Writes the structs back as YAML, in the same order and with the same keys as the reader.
class writer {
 public:
  writer() { out_ << YAML::BeginMap; }
  std::string finish() {
    out_ << YAML::EndMap;
    return std::string(out_.c_str()) + "\n";
  }
  template <class F>
  void block(const char* key, F&& body) {
    out_ << YAML::Key << key << YAML::Value << YAML::BeginMap;
    body();
    out_ << YAML::EndMap;
  }
  void field(const char* key, const std::string& v) {
    out_ << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << v;
  }
  void field(const char* key, bool v) { out_ << YAML::Key << key << YAML::Value << (v ? "true" : "false"); }
  void field(const char* key, int v) { out_ << YAML::Key << key << YAML::Value << v; }
  void field(const char* key, std::uint64_t v) { out_ << YAML::Key << key << YAML::Value << v; }
  void field(const char* key, double v) { out_ << YAML::Key << key << YAML::Value << format_double(v); }
  void nullable(const char* key, const std::string& v) {
    if (v.empty())
      out_ << YAML::Key << key << YAML::Value << YAML::Null;
    else
      field(key, v);
  }
  template <class E>
  void choice(const char* key, E& value, std::initializer_list<E>) {
    // Quoted: YAML 1.1 readers (PyYAML) would otherwise take off/on for booleans.
    out_ << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << to_string(value);
  }
  void numbers(const char* key, const std::vector<double>& v) {
    out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (double d : v) out_ << format_double(d);
    out_ << YAML::EndSeq;
  }
  void batch_size(const char* key, int value, bool is_auto) {
    if (is_auto)
      out_ << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << "auto";
    else
      field(key, value);
  }

 private:
  YAML::Emitter out_;
};

// Lists the keys with their kinds (profile_keys()).
class lister {
 public:
  explicit lister(std::vector<profile_key>& out) : out_(out) {}
  template <class F>
  void block(const char* key, F&& body) {
    prefix_.push_back(key);
    body();
    prefix_.pop_back();
  }
  template <class T>
  void field(const char* key, T&) {
    add(key, std::is_same<T, bool>::value            ? key_kind::boolean
             : std::is_same<T, std::uint64_t>::value ? key_kind::unsigned_integer
             : std::is_integral<T>::value            ? key_kind::integer
             : std::is_floating_point<T>::value      ? key_kind::number
                                                     : key_kind::string);
  }
  void nullable(const char* key, std::string&) { add(key, key_kind::nullable_string); }
  template <class E>
  void choice(const char* key, E&, std::initializer_list<E> allowed) {
    add(key, key_kind::choice);
    for (E e : allowed) out_.back().allowed.push_back(to_string(e));
  }
  void numbers(const char* key, std::vector<double>&) { add(key, key_kind::numbers); }
  void batch_size(const char* key, int&, bool&) { add(key, key_kind::batch_size); }

 private:
  void add(const char* key, key_kind kind) {
    prefix_.push_back(key);
    out_.push_back({join(prefix_, "."), kind, {}});
    prefix_.pop_back();
  }
  std::vector<profile_key>& out_;
  std::vector<std::string> prefix_;
};

// The one list of every key: reading, writing and hashing all walk it.
template <class V>
void visit(V& v, profile& p) {
  v.field("name", p.name);
  v.field("description", p.description);
  v.field("device", p.device);
  v.field("seed", p.seed);
  v.field("threads", p.threads);
  v.block("model", [&] {
    v.field("arch", p.model.arch);
    v.field("num_classes", p.model.num_classes);
    v.nullable("weights", p.model.weights);
    v.field("channels_last", p.model.channels_last);
    v.field("zero_init_residual", p.model.zero_init_residual);
  });
  v.block("data", [&] {
    auto& d = p.data;
    v.choice("source", d.source,
             {data_source::cifar10, data_source::fashion_mnist, data_source::mnist, data_source::synthetic,
              data_source::device_synthetic, data_source::imagefolder});
    v.field("path", d.path);
    v.field("split", d.split);
    v.field("image_size", d.image_size);
    v.block("normalize", [&] {
      v.numbers("mean", d.normalize.mean);
      v.numbers("std", d.normalize.std);
    });
    v.field("workers", d.workers);
    v.field("prefetch_factor", d.prefetch_factor);
    v.field("pin_memory", d.pin_memory);
    v.field("shuffle", d.shuffle);
    v.field("drop_last", d.drop_last);
    v.choice("preprocess", d.preprocess, {preprocess_place::host, preprocess_place::device});
    v.choice("fallback", d.fallback, {data_fallback::none, data_fallback::synthetic});
    v.field("samples", d.samples);
    v.field("source_size", d.source_size);
    v.choice("transform", d.transform, {data_transform::train, data_transform::eval});
    v.choice("decode", d.decode, {decode_place::host, decode_place::device});
    v.choice("decode_off_engines", d.decode_off_engines, {decode_place::host, decode_place::device});
    v.field("device_decode_share", d.device_decode_share);
    v.choice("on_bad_file", d.on_bad_file, {bad_file_policy::error, bad_file_policy::skip});
    v.field("partial_decode", d.partial_decode);
    v.field("max_image_pixels", d.max_image_pixels);
    v.field("max_image_bytes", d.max_image_bytes);
  });
  v.block("train", [&] {
    auto& t = p.train;
    v.batch_size("batch_size", t.batch_size, t.batch_size_auto);
    v.field("grad_accumulation", t.grad_accumulation);
    v.block("optimizer", [&] {
      v.field("name", t.optimizer.name);
      v.field("lr", t.optimizer.lr);
      v.field("momentum", t.optimizer.momentum);
      v.field("weight_decay", t.optimizer.weight_decay);
      v.field("foreach", t.optimizer.foreach);
    });
    v.choice("amp", t.amp, {amp_mode::off, amp_mode::fp16, amp_mode::bf16});
    v.choice("grad_scaler", t.grad_scaler, {switch_mode::automatic, switch_mode::on, switch_mode::off});
  });
  v.block("transfer", [&] {
    v.field("non_blocking", p.transfer.non_blocking);
    v.field("copy_stream", p.transfer.copy_stream);
    v.field("depth", p.transfer.depth);
  });
  v.block("backend", [&] {
    v.field("cudnn_benchmark", p.backend.cudnn_benchmark);
    v.field("tf32", p.backend.tf32);
    v.field("cuda_graph", p.backend.cuda_graph);
    v.field("compile", p.backend.compile);
    v.choice("fused_batch_norm", p.backend.fused_batch_norm,
             {fused_bn_route::automatic, fused_bn_route::graph, fused_bn_route::ex});
    v.field("pad_stem", p.backend.pad_stem);
    v.field("conv_fusion", p.backend.conv_fusion);
  });
  v.block("measure", [&] {
    v.field("warmup_batches", p.measure.warmup_batches);
    v.field("measured_batches", p.measure.measured_batches);
    v.field("repeats", p.measure.repeats);
    v.field("processes", p.measure.processes);
    v.field("max_repeats", p.measure.max_repeats);
    v.field("target_cv", p.measure.target_cv);
    v.field("min_window_s", p.measure.min_window_s);
    v.choice("nvtx", p.measure.nvtx, {nvtx_level::off, nvtx_level::batch, nvtx_level::stage});
    v.field("trace", p.measure.trace);
    v.field("kernel_families", p.measure.kernel_families);
  });
  v.block("report", [&] { v.field("path", p.report.path); });
  v.block("dist", [&] {
    v.choice("backend", p.dist.backend,
             {dist_backend::none, dist_backend::automatic, dist_backend::gloo, dist_backend::nccl});
    v.field("timeout_s", p.dist.timeout_s);
    v.field("heartbeat_timeout_s", p.dist.heartbeat_timeout_s);
    v.field("bucket_mb", p.dist.bucket_mb);
  });
}

bool valid_device(const std::string& d) {
  if (d == "auto" || d == "cpu" || d == "cuda") return true;
  if (d.rfind("cuda:", 0) != 0 || d.size() == 5) return false;
  return d.find_first_not_of("0123456789", 5) == std::string::npos;
}

void validate(const reader& r, const profile& p) {
  auto require = [&](bool ok, const char* key, const std::string& message) {
    if (!ok) r.fail(key, message);
  };
  auto at_least = [&](int value, int low, const char* key) {
    require(value >= low, key, "must be >= " + std::to_string(low) + ", got " + std::to_string(value));
  };
  require(!p.name.empty(), "name", "must not be empty");
  require(valid_device(p.device), "device", "unknown value '" + p.device + "'; allowed: auto, cpu, cuda, cuda:N");
  at_least(p.threads, 0, "threads");
  require(find_resnet_spec(p.model.arch) != nullptr, "model.arch", unknown_arch_message(p.model.arch));
  at_least(p.model.num_classes, 1, "model.num_classes");
  at_least(p.data.image_size, 8, "data.image_size");
  const bool folder = p.data.source == data_source::imagefolder;
  if (folder)
    require(p.data.split == "train" || p.data.split == "val", "data.split",
            "unknown value '" + p.data.split + "'; allowed for imagefolder: train, val (root/train, root/val)");
  else
    require(p.data.split == "train" || p.data.split == "test", "data.split",
            "unknown value '" + p.data.split + "'; allowed: train, test");
  constexpr std::size_t channels = 3;  // ResNet-18's stem; grayscale sources are replicated
  require(p.data.normalize.mean.size() == channels, "data.normalize.mean",
          "expected 3 values (one per input channel), got " + std::to_string(p.data.normalize.mean.size()));
  require(p.data.normalize.std.size() == channels, "data.normalize.std",
          "expected 3 values (one per input channel), got " + std::to_string(p.data.normalize.std.size()));
  for (double s : p.data.normalize.std) require(s > 0, "data.normalize.std", "every value must be > 0");
  at_least(p.data.workers, 0, "data.workers");
  at_least(p.data.prefetch_factor, 1, "data.prefetch_factor");
  at_least(p.data.samples, 1, "data.samples");
  at_least(p.data.source_size, 1, "data.source_size");
  at_least(p.data.max_image_pixels, 1, "data.max_image_pixels");
  at_least(p.data.max_image_bytes, 1, "data.max_image_bytes");
  require(!(folder && p.data.preprocess == preprocess_place::device), "data.preprocess",
          "'device' ships fixed-size source images, and an image folder's JPEGs vary in size; "
          "use data.decode: device to decode and crop on the GPU");
  require(folder || p.data.decode == decode_place::host, "data.decode",
          "'device' decodes JPEGs and needs data.source: imagefolder");
  {
    char share[32];
    std::snprintf(share, sizeof share, "%g", p.data.device_decode_share);
    require(p.data.device_decode_share >= 0 && p.data.device_decode_share <= 1, "data.device_decode_share",
            std::string("must be in [0, 1] (the share of each batch offered to the GPU's JPEG decoder), got ") + share);
  }
  if (!p.train.batch_size_auto) at_least(p.train.batch_size, 1, "train.batch_size");
  // ResNet halves the side five times; batch norm in training needs two values per channel there.
  const long long last_side = (static_cast<long long>(p.data.image_size) + 31) / 32;
  require(p.train.batch_size_auto || p.train.batch_size * last_side * last_side >= 2, "train.batch_size",
          "1 image of data.image_size " + std::to_string(p.data.image_size) +
              " leaves batch norm one value per channel after the last stage (1 x 1); give at least 2, or "
              "data.image_size > 32");
  at_least(p.train.grad_accumulation, 1, "train.grad_accumulation");
  require(p.train.optimizer.name == "sgd", "train.optimizer.name",
          "unknown value '" + p.train.optimizer.name + "'; allowed: sgd");
  require(p.train.optimizer.lr > 0, "train.optimizer.lr", "must be > 0");
  require(p.train.optimizer.momentum >= 0 && p.train.optimizer.momentum < 1, "train.optimizer.momentum",
          "must be in [0, 1)");
  require(p.train.optimizer.weight_decay >= 0, "train.optimizer.weight_decay", "must be >= 0");
  require(!(p.train.grad_scaler == switch_mode::on && p.train.amp != amp_mode::fp16), "train.grad_scaler",
          "'on' needs train.amp: fp16 (bf16 and fp32 do not underflow the way fp16 does)");
  at_least(p.transfer.depth, 2, "transfer.depth");
  at_least(p.measure.warmup_batches, 0, "measure.warmup_batches");
  at_least(p.measure.measured_batches, 1, "measure.measured_batches");
  at_least(p.measure.repeats, 1, "measure.repeats");
  at_least(p.measure.processes, 1, "measure.processes");
  require(p.measure.max_repeats == 0 || p.measure.max_repeats >= p.measure.repeats, "measure.max_repeats",
          "must be 0 (exactly measure.repeats windows) or >= measure.repeats (" + std::to_string(p.measure.repeats) +
              "), got " + std::to_string(p.measure.max_repeats));
  require(p.measure.target_cv > 0, "measure.target_cv", "must be > 0");
  require(p.measure.min_window_s >= 0 && p.measure.min_window_s <= 3600, "measure.min_window_s",
          "must be in [0, 3600] seconds (0: measure.measured_batches per window)");
  require(!p.report.path.empty(), "report.path", "must not be empty");
  // Below a second the rendezvous store cannot even connect to itself (and c10d reads a timeout
  // rounded down to 0 ms as none at all).
  char timeout[32];
  std::snprintf(timeout, sizeof timeout, "%g", p.dist.timeout_s);
  require(p.dist.timeout_s >= 1, "dist.timeout_s",
          std::string("must be >= 1 second (how long a rank waits for the others), got ") + timeout);
  require(p.dist.heartbeat_timeout_s == 0 || p.dist.heartbeat_timeout_s >= 0.5, "dist.heartbeat_timeout_s",
          "must be 0 (no heartbeat: only dist.timeout_s) or >= 0.5 seconds");
  require(p.dist.bucket_mb > 0, "dist.bucket_mb", "must be > 0");
  // backend.compile captures the step as backend.cuda_graph does (on CUDA), so it asks the same;
  // the profile is valid or not whatever device it later runs on.
  for (const auto& [on, key] : {std::pair<bool, const char*>{p.backend.cuda_graph, "backend.cuda_graph"},
                                {p.backend.compile, "backend.compile"}}) {
    if (!on) continue;
    require(p.train.grad_accumulation == 1, key,
            "a graph captures one whole step; it cannot be combined with train.grad_accumulation > 1");
    require(p.data.drop_last, key, "a graph needs fixed shapes: set data.drop_last: true");
  }
  require(!(p.train.batch_size_auto && p.dist.backend != dist_backend::none), "train.batch_size",
          "'auto' is not supported with data-parallel runs; give a number");
  if (auto v = check_bounds(p)) r.fail(v->key, v->message);  // the upper bounds (config/bounds.cpp)
}

// A file that sets no key runs every default: almost certainly the wrong file.
void check_not_empty(const YAML::Node& root, const fs::path& file) {
  std::set<std::string> top;
  for (const auto& k : profile_keys()) top.insert(k.path.substr(0, k.path.find('.')));
  std::vector<std::string> unknown;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (top.count(it->first.Scalar())) return;
    unknown.push_back(it->first.Scalar());
  }
  throw config_error(
      file.string(), "",
      unknown.empty()
          ? "empty profile: it sets no key, so every default would run; is it the right file?"
          : "empty profile: none of its keys (" + join(unknown, ", ") + ") is a trainbench key; is it the right file?");
}

// Defaults that depend on the source: image folders are ImageNet-style, so they get ImageNet's
// normalisation (torchvision's reference recipe) unless the profile sets its own.
void apply_source_defaults(const origin_map& origins, profile& p) {
  if (p.data.source != data_source::imagefolder) return;
  if (!origins.count("data.normalize.mean")) p.data.normalize.mean = {0.485, 0.456, 0.406};
  if (!origins.count("data.normalize.std")) p.data.normalize.std = {0.229, 0.224, 0.225};
}

}  // namespace

namespace {

// An input path written in a profile file is relative to that file (where the reader of the
// file looks), one given with --set to the working directory (where the shell is).
void resolve_input_path(std::string& path, const std::string& key, const origin_map& origins) {
  if (path.empty() || fs::path(path).is_absolute()) return;
  auto it = origins.find(key);
  if (it == origins.end() || it->second.file.rfind("--set ", 0) == 0) return;
  path = (fs::path(it->second.file).parent_path() / path).lexically_normal().string();
}

profile read_profile(const YAML::Node& root, const origin_map& origins, const fs::path& file) {
  profile p;
  reader r(root, origins, file.string());
  visit(r, p);
  r.finish();
  apply_source_defaults(origins, p);
  resolve_input_path(p.data.path, "data.path", origins);
  resolve_input_path(p.model.weights, "model.weights", origins);
  validate(r, p);
  return p;
}

// Removes a dotted key from the tree, so that the next read sees its default.
bool remove_key(const YAML::Node& root, const std::string& key) {
  const auto parts = split(key, '.');
  YAML::Node node = root;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!node.IsMap() || !node[parts[i]]) return false;
    node.reset(node[parts[i]]);  // re-point the handle; operator= would overwrite the node
  }
  return node.IsMap() && node.remove(parts.back());
}

}  // namespace

loaded_profile load_profile(const fs::path& file, const std::vector<std::string>& sets) {
  origin_map origins;
  loaded_profile out;
  out.path = file;
  YAML::Node root = load_chain(file, origin{file.string(), -1, -1}, out.chain, origins);
  check_not_empty(root, file);
  for (const auto& s : sets) apply_set(root, s, origins);
  out.value = read_profile(root, origins, file);
  out.sets = sets;
  return out;
}

std::string origin_of(const loaded_profile& lp, const std::string& key) {
  for (auto it = lp.sets.rbegin(); it != lp.sets.rend(); ++it) {
    const std::string set_key = it->substr(0, it->find('='));
    if (key == set_key || key.rfind(set_key + ".", 0) == 0) return "--set " + *it;
  }
  return lp.path.string();
}

std::string profile_and_sets(const loaded_profile& lp) {
  std::string out = lp.path.string();
  for (std::size_t i = 0; i < lp.sets.size(); ++i) out += (i ? ", --set " : " with --set ") + lp.sets[i];
  return out;
}

std::vector<config_error> profile_errors(const fs::path& file) {
  std::vector<config_error> errors;
  origin_map origins;
  std::vector<std::string> chain;
  YAML::Node root;
  try {
    root = load_chain(file, origin{file.string(), -1, -1}, chain, origins);
    check_not_empty(root, file);
  } catch (const config_error& e) {
    return {e};  // unreadable YAML or extends, or no key at all: nothing further to check
  }
  // Each error's key is taken out and the rest read again, until the profile reads cleanly or
  // an error cannot be taken out (then it is the last one worth reporting).
  for (;;) {
    try {
      read_profile(root, origins, file);
      return errors;
    } catch (const config_error& e) {
      errors.push_back(e);
      if (e.key().empty() || !remove_key(root, e.key()) || errors.size() >= 100) return errors;
    }
  }
}

std::string to_yaml(const profile& p) {
  writer w;
  profile copy = p;
  visit(w, copy);
  return w.finish();
}

std::vector<profile_key> profile_keys() {
  std::vector<profile_key> out;
  lister l(out);
  profile p;
  visit(l, p);
  return out;
}

std::string profile_hash(const profile& p) { return hex64(fnv1a64(to_yaml(p))); }

std::string workload_hash(const profile& p) {
  profile copy = p;
  copy.name.clear();
  copy.description.clear();
  copy.report = report_config{};
  copy.measure = measure_config{};
  return hex64(fnv1a64(to_yaml(copy)));
}

std::string per_rank_workload_hash(const profile& p) {
  profile copy = p;
  copy.dist = dist_config{};
  return workload_hash(copy);
}

}  // namespace trainbench
