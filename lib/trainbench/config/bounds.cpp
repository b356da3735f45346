#include "trainbench/config/bounds.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "trainbench/util/text.hpp"

namespace trainbench {

namespace {

constexpr double mib = 1024.0 * 1024;
constexpr double float_bytes = 4;
constexpr double fp32_max = std::numeric_limits<float>::max();
constexpr double resnet_features = 512;     // ResNet-18's last layer feeds the classifier this many
constexpr std::size_t max_file_name = 255;  // NAME_MAX of Linux file systems
constexpr std::size_t max_path = 4095;      // PATH_MAX less the terminating zero

std::string bytes_text(double b) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) {
    b /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string number_text(double v) {
  char buf[64];
  if (std::abs(v) < 9.0e15 && v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// One row of the table: a key, its value, its bound, and what the value would take (in words).
struct upper_bound {
  const char* key;
  double value;
  double max;
  std::string need;
};

// The per-key maxima. Each is far beyond what a real run uses and well below what would make a
// derived size wrap; docs/config.md lists them.
std::vector<upper_bound> upper_bounds(const profile& p) {
  const auto& d = p.data;
  const auto& m = p.measure;
  const double s = d.image_size, src = d.source_size;
  std::vector<upper_bound> out = {
      {"threads", double(p.threads), 1024, number_text(p.threads) + " intra-op threads, each with its own stack"},
      {"model.num_classes", double(p.model.num_classes), 1e6,
       "a classifier of " + bytes_text((resnet_features + 1) * p.model.num_classes * float_bytes) +
           " of fp32 weights (three times that with gradients and momentum)"},
      {"data.image_size", s, 8192,
       "one 3 x " + number_text(s) + " x " + number_text(s) + " float image of " + bytes_text(3 * s * s * float_bytes) +
           ", before any activation"},
      {"data.workers", double(d.workers), 1024,
       number_text(d.workers) + " loader threads, each with data.prefetch_factor batch buffers"},
      {"data.prefetch_factor", double(d.prefetch_factor), 1024,
       number_text(d.prefetch_factor) + " batch buffers per loader thread"},
      {"data.samples", double(d.samples), 1e8,
       number_text(d.samples) + " synthetic images of " + bytes_text(3 * src * src) + " each in memory (" +
           bytes_text(3 * src * src * d.samples) + ")"},
      {"data.source_size", src, 8192,
       "one " + number_text(src) + " x " + number_text(src) + " x 3 image of " + bytes_text(3 * src * src) +
           ", for each of data.samples"},
      {"train.grad_accumulation", double(p.train.grad_accumulation), 65536,
       number_text(p.train.grad_accumulation) + " forward and backward passes per optimizer step"},
      {"transfer.depth", double(p.transfer.depth), 64,
       number_text(p.transfer.depth) + " batches in flight on the device at once"},
      {"measure.warmup_batches", double(m.warmup_batches), 1e6,
       number_text(m.warmup_batches) + " batches before the first measurement"},
      {"measure.measured_batches", double(m.measured_batches), 1e6,
       "timing records (on CUDA two events per stage) for " + number_text(m.measured_batches) + " batches per window"},
      {"measure.repeats", double(m.repeats), 1e4, number_text(m.repeats) + " measured windows"},
      {"measure.max_repeats", double(m.max_repeats), 1e4, number_text(m.max_repeats) + " measured windows"},
      {"measure.processes", double(m.processes), 1e4, number_text(m.processes) + " fresh processes"},
      {"dist.timeout_s", p.dist.timeout_s, 7 * 24 * 3600.0,
       "waiting " + number_text(p.dist.timeout_s / 86400) + " days for a silent rank"},
      {"dist.heartbeat_timeout_s", p.dist.heartbeat_timeout_s, 7 * 24 * 3600.0,
       "waiting " + number_text(p.dist.heartbeat_timeout_s / 86400) + " days for a silent heartbeat"},
      {"dist.bucket_mb", p.dist.bucket_mb, 1024 * 1024.0, "gradient buckets of " + bytes_text(p.dist.bucket_mb * mib)},
  };
  if (!p.train.batch_size_auto)
    out.push_back({"train.batch_size", double(p.train.batch_size), 1 << 20,
                   number_text(p.train.batch_size) + " images per batch"});
  return out;
}

// Numbers that are not finite would pass the lower bounds (inf > 0) and wrap in conversions.
std::optional<bound_violation> check_finite(const profile& p) {
  const std::pair<const char*, double> numbers[] = {
      {"train.optimizer.lr", p.train.optimizer.lr},
      {"train.optimizer.momentum", p.train.optimizer.momentum},
      {"train.optimizer.weight_decay", p.train.optimizer.weight_decay},
      {"measure.target_cv", p.measure.target_cv},
      {"dist.timeout_s", p.dist.timeout_s},
      {"dist.heartbeat_timeout_s", p.dist.heartbeat_timeout_s},
      {"dist.bucket_mb", p.dist.bucket_mb},
  };
  for (const auto& [key, v] : numbers)
    if (!std::isfinite(v)) return bound_violation{key, "must be a finite number, got " + number_text(v)};
  // The SGD step runs in the parameters' type: a factor past fp32's range cannot be held.
  for (const auto& [key, v] : {std::pair<const char*, double>{"train.optimizer.lr", p.train.optimizer.lr},
                               {"train.optimizer.weight_decay", p.train.optimizer.weight_decay}})
    if (std::abs(v) > fp32_max)
      return bound_violation{key, number_text(v) + " does not fit in fp32, the type of the SGD step; the bound is " +
                                      number_text(fp32_max)};
  for (const char* key : {"data.normalize.mean", "data.normalize.std"}) {
    const auto& values = std::string(key) == "data.normalize.mean" ? p.data.normalize.mean : p.data.normalize.std;
    for (double v : values)
      if (!std::isfinite(v)) return bound_violation{key, "every value must be a finite number, got " + number_text(v)};
  }
  return std::nullopt;
}

// The report is one file: every component of its path must be a name the file system takes.
std::optional<bound_violation> check_report_path(const profile& p) {
  const std::string path = report_path_for(p);
  const bool from_name = p.report.path.find("{name}") != std::string::npos;
  auto too_long = [&](const std::string& what) {
    const bool name_is_it = from_name && p.name.size() > max_file_name - 5;  // room for ".json"
    return bound_violation{name_is_it ? "name" : "report.path",
                           what + (name_is_it ? " ({name} is " + std::to_string(p.name.size()) + " characters)" : "")};
  };
  if (path.size() > max_path)
    return too_long("the report path is " + std::to_string(path.size()) + " characters; the bound is " +
                    std::to_string(max_path));
  for (const auto& part : split(path, '/'))
    if (part.size() > max_file_name)
      return too_long("a component of the report path is " + std::to_string(part.size()) +
                      " characters; file systems take at most " + std::to_string(max_file_name));
  return std::nullopt;
}

// What the values imply together: the loader's ring of batch buffers and a synthetic dataset.
std::optional<bound_violation> check_host_memory(const profile& p) {
  if (p.train.batch_size_auto) return std::nullopt;  // the search sizes the batch to the device
  const auto& d = p.data;
  const double image = 3.0 * d.image_size * d.image_size * float_bytes;
  const double batch = image * p.train.batch_size;
  const bool host_data = d.source != data_source::device_synthetic;
  const double buffers = host_data ? double(loader_slot_count(d.workers, d.prefetch_factor)) : 1.0;
  const bool synthetic = d.source == data_source::synthetic || d.fallback == data_fallback::synthetic;
  const double dataset = synthetic ? 3.0 * d.source_size * d.source_size * d.samples : 0.0;
  if (buffers * batch + dataset <= max_host_bytes) return std::nullopt;
  std::string need;
  if (host_data)
    need = "the loader's " + number_text(buffers) + " batch buffers (data.workers x data.prefetch_factor, at least 2)";
  else
    need = "the device-synthetic batch";
  need += " of train.batch_size " + number_text(p.train.batch_size) + " images at data.image_size " +
          number_text(d.image_size) + " need " + bytes_text(buffers * batch);
  if (dataset > 0)
    need += ", the synthetic images (data.samples x data.source_size^2 x 3) " + bytes_text(dataset) + " more";
  const char* key = dataset > buffers * batch ? "data.samples" : "train.batch_size";
  return bound_violation{key, need + "; the bound is " + bytes_text(max_host_bytes) + " in all"};
}

}  // namespace

std::optional<bound_violation> check_bounds(const profile& p) {
  if (auto v = check_finite(p)) return v;
  for (const auto& b : upper_bounds(p)) {
    if (b.value <= b.max) continue;
    return bound_violation{b.key, number_text(b.value) + " is more than any machine can serve: it would need " +
                                      b.need + "; the bound is " + number_text(b.max)};
  }
  if (auto v = check_report_path(p)) return v;
  return check_host_memory(p);
}

}  // namespace trainbench
