// The fused crop kernel: a batch of decoded images (one job each) cropped, resized with the
// antialiased bilinear filter, flipped, normalised and written in the model's layout and dtype,
// in one launch. Each block takes a tile of 32 x 8 output pixels of one image: its first warp
// computes the tile's column taps and its second the row taps (make_span_taps' arithmetic, in
// double) into shared memory, then every thread computes one output pixel's three channels.
// The per-pixel arithmetic is fused_crop_math's, which data/fused_crop.cpp runs on the host.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainbench/cuda/cuda_check.hpp"
#include "trainbench/cuda/fused_crop.hpp"
#include "trainbench/data/fused_crop.hpp"

namespace trainbench {

namespace {

constexpr int tile_w = 32, tile_h = 8;
constexpr int max_shared_bytes = 48 * 1024;  // the default limit: no opt-in attribute, so any GPU
constexpr int max_reusable_tables = 16;
constexpr int max_jobs = 65535;  // gridDim.y

int shared_bytes(int bx, int by) {
  return (tile_w * bx + tile_h * by) * static_cast<int>(sizeof(float)) +
         (2 * tile_w + 2 * tile_h) * static_cast<int>(sizeof(int));
}

__global__ void __launch_bounds__(tile_w* tile_h)
    fused_crop_kernel(const fused_crop_job* jobs, fused_crop_output out, fused_crop_normalizer norm, int bx, int by,
                      int tiles_x) {
  extern __shared__ float shared[];
  float* wx = shared;            // tile_w x bx column weights
  float* wy = wx + tile_w * bx;  // tile_h x by row weights
  int* x0 = reinterpret_cast<int*>(wy + tile_h * by);
  int* nx = x0 + tile_w;
  int* y0 = nx + tile_w;
  int* ny = y0 + tile_h;
  const int slot = static_cast<int>(blockIdx.y);
  const fused_crop_job job = jobs[slot];
  const int s = out.size;
  const int left = static_cast<int>(blockIdx.x % tiles_x) * tile_w,
            top = static_cast<int>(blockIdx.x / tiles_x) * tile_h;
  const int t = static_cast<int>(threadIdx.y) * tile_w + static_cast<int>(threadIdx.x);
  if (t < tile_w) {
    const int x = left + t;
    if (x < s) x0[t] = fused_crop_math::axis_taps(job.plan.x, job.plan.flip ? s - 1 - x : x, wx + t * bx, nx[t]);
  } else if (t < tile_w + tile_h) {
    const int k = t - tile_w, y = top + k;
    if (y < s) y0[k] = fused_crop_math::axis_taps(job.plan.y, y, wy + k * by, ny[k]);
  }
  __syncthreads();
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int x = left + tx, y = top + ty;
  if (x >= s || y >= s) return;
  float sums[3];
  fused_crop_math::pixel_sums(job.pixels, job.pitch, job.channels, x0[tx], nx[tx], wx + tx * bx, y0[ty], ny[ty],
                              wy + ty * by, sums);
  fused_crop_math::store_pixel(out, norm, slot, y, x, sums);
}

// Potentially unsafe calls (allocations, event queries) are allowed while any stream of this
// thread is being captured: the capture of the launch's own copy and kernel is unaffected.
struct relaxed_capture_mode {
  cudaStreamCaptureMode previous = cudaStreamCaptureModeRelaxed;
  relaxed_capture_mode() { TB_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&previous)); }
  ~relaxed_capture_mode() { TB_CUDA_WARN(cudaThreadExchangeStreamCaptureMode(&previous)); }
  relaxed_capture_mode(const relaxed_capture_mode&) = delete;
  relaxed_capture_mode& operator=(const relaxed_capture_mode&) = delete;
};

// One launch's job table: pinned on the host, copied to the device on the launch's stream.
struct job_table {
  fused_crop_job* host = nullptr;
  fused_crop_job* device = nullptr;
  int capacity = 0;
  cudaEvent_t done = nullptr;  // after the kernel that read it (reusable tables only)
  bool recorded = false;
  bool captured = false;  // owned by a captured graph: never reused
  std::uint64_t last_use = 0;

  void release() noexcept {
    if (done) TB_CUDA_WARN(cudaEventDestroy(done));
    if (device) TB_CUDA_WARN(cudaFree(device));
    if (host) TB_CUDA_WARN(cudaFreeHost(host));
    host = nullptr;
    device = nullptr;
    done = nullptr;
    capacity = 0;
    recorded = false;
  }

  void allocate(int n) {
    release();
    const std::size_t bytes = sizeof(fused_crop_job) * static_cast<std::size_t>(n);
    try {
      TB_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), bytes, cudaHostAllocDefault));
      TB_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device), bytes));
      TB_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    } catch (...) {
      release();
      throw;
    }
    capacity = n;
  }

  // True once the kernel that last read this table has finished.
  bool idle() const {
    if (!recorded) return true;
    const cudaError_t e = cudaEventQuery(done);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not an error: clear it
      return false;
    }
    TB_CUDA_CHECK(e);
    return true;
  }
};

}  // namespace

struct fused_crop_launcher::state {
  std::vector<job_table> tables;
  int device = -1;
  std::uint64_t launches = 0;

  // The tables belong to the device current at the first launch or reserve; any later call must
  // be made on that device.
  void bind_current_device(const char* what) {
    int current = -1;
    TB_CUDA_CHECK(cudaGetDevice(&current));
    if (device < 0) device = current;
    if (current != device)
      throw std::invalid_argument(std::string("fused crop: ") + what + " on device " + std::to_string(current) +
                                  ", but this launcher's tables are on device " + std::to_string(device));
  }

  job_table& take(int n, bool capturing) {
    if (capturing) {
      tables.emplace_back();
      job_table& t = tables.back();
      t.captured = true;
      try {
        t.allocate(n);
      } catch (...) {
        tables.pop_back();
        throw;
      }
      return t;
    }
    job_table* pick = nullptr;
    job_table* oldest = nullptr;
    int reusable = 0;
    for (job_table& t : tables) {
      if (t.captured) continue;
      ++reusable;
      if (!oldest || t.last_use < oldest->last_use) oldest = &t;
      if (!pick && t.idle()) pick = &t;
    }
    if (!pick && reusable < max_reusable_tables) {
      tables.emplace_back();
      pick = &tables.back();
    }
    if (!pick) {
      TB_CUDA_CHECK(cudaEventSynchronize(oldest->done));
      pick = oldest;
    }
    pick->recorded = false;
    if (pick->capacity < n) pick->allocate(std::max(n, 64));
    return *pick;
  }
};

fused_crop_launcher::fused_crop_launcher() : s_(std::make_unique<state>()) {}

fused_crop_launcher::~fused_crop_launcher() {
  for (job_table& t : s_->tables) {
    if (t.recorded) TB_CUDA_WARN(cudaEventSynchronize(t.done));
    t.release();
  }
}

namespace {
// The widest taps a pixel reads on each axis over jobs[0, n).
void tap_bounds(const fused_crop_job* jobs, int n, int& bx, int& by) {
  bx = by = 1;
  for (int i = 0; i < n; ++i) {
    bx = std::max(bx, fused_crop_math::tap_bound(jobs[i].plan.x));
    by = std::max(by, fused_crop_math::tap_bound(jobs[i].plan.y));
  }
}
}  // namespace

bool fused_crop_launcher::fits(const fused_crop_job* jobs, int n) {
  int bx = 1, by = 1;
  tap_bounds(jobs, n, bx, by);
  return shared_bytes(bx, by) <= max_shared_bytes;
}

void fused_crop_launcher::reserve(int jobs, int tables) {
  s_->bind_current_device("reserve");
  tables = std::min(tables, max_reusable_tables);
  int made = 0;
  for (job_table& t : s_->tables) {
    if (t.captured || made == tables) continue;
    if (t.capacity < jobs) {
      if (t.recorded) TB_CUDA_CHECK(cudaEventSynchronize(t.done));
      t.allocate(jobs);
    }
    ++made;
  }
  for (; made < tables; ++made) {
    s_->tables.emplace_back();
    try {
      s_->tables.back().allocate(jobs);
    } catch (...) {
      s_->tables.pop_back();
      throw;
    }
  }
}

int fused_crop_launcher::tables() const { return static_cast<int>(s_->tables.size()); }

int fused_crop_launcher::captured_tables() const {
  return static_cast<int>(
      std::count_if(s_->tables.begin(), s_->tables.end(), [](const job_table& t) { return t.captured; }));
}

void fused_crop_launcher::launch(const fused_crop_job* jobs, int n, const fused_crop_output& out,
                                 const fused_crop_normalizer& norm, CUstream_st* stream) {
  if (n == 0) return;
  if (n < 0 || n > max_jobs)
    throw std::invalid_argument("fused crop: " + std::to_string(n) + " jobs in one launch (1 to " +
                                std::to_string(max_jobs) + ")");
  if (const std::string p = fused_crop_output_problem(out, n); !p.empty())
    throw std::invalid_argument("fused crop: " + p);
  for (int i = 0; i < n; ++i)
    if (const std::string p = fused_crop_problem(jobs[i], out.size); !p.empty())
      throw std::invalid_argument("fused crop: job " + std::to_string(i) + ": " + p);
  int bx = 1, by = 1;
  tap_bounds(jobs, n, bx, by);
  const int shared = shared_bytes(bx, by);
  if (shared > max_shared_bytes)
    throw std::invalid_argument("fused crop: a job shrinks by so much that its taps (" + std::to_string(bx) + " x " +
                                std::to_string(by) + " per output pixel) need " + std::to_string(shared) +
                                " bytes of shared memory, more than " + std::to_string(max_shared_bytes));
  s_->bind_current_device("launched");
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TB_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  const bool capturing = capture != cudaStreamCaptureStatusNone;

  job_table* table = nullptr;
  {
    relaxed_capture_mode relaxed;
    table = &s_->take(n, capturing);
  }
  std::memcpy(table->host, jobs, sizeof(fused_crop_job) * static_cast<std::size_t>(n));
  TB_CUDA_CHECK(cudaMemcpyAsync(table->device, table->host, sizeof(fused_crop_job) * static_cast<std::size_t>(n),
                                cudaMemcpyHostToDevice, stream));
  const int tiles_x = (out.size + tile_w - 1) / tile_w, tiles_y = (out.size + tile_h - 1) / tile_h;
  const dim3 grid(static_cast<unsigned>(tiles_x * tiles_y), static_cast<unsigned>(n));
  const dim3 block(tile_w, tile_h);
  fused_crop_kernel<<<grid, block, static_cast<std::size_t>(shared), stream>>>(table->device, out, norm, bx, by,
                                                                               tiles_x);
  TB_CUDA_CHECK(cudaGetLastError());
  if (!capturing) {
    TB_CUDA_CHECK(cudaEventRecord(table->done, stream));
    table->recorded = true;
    table->last_use = ++s_->launches;
  }
}

}  // namespace trainbench
