#pragma once
// The random images of the fused crop kernel's GPU checks (test_fused_crop_gpu.cpp and the
// torch-free crop_check.cpp): sizes, pitches and plans drawn from one generator in one order, so
// both hold the kernel to the same batches. Each takes the pixels from a source of its own.
#include <cstdint>
#include <random>

#include "trainbench/data/crop.hpp"
#include "trainbench/data/fused_crop.hpp"

namespace tbgpu {

// Image i of a batch drawn from rng (seeded with `seed`): 1 to max_side pixels a side, every
// fifth grayscale, a row pitch up to 3 bytes past its pixels, every fourth an eval crop and the
// others a train crop with a random flip. The job's pixels are left null.
inline trainbench::fused_crop_job random_crop_job(std::mt19937& rng, std::uint32_t seed, int i, int size,
                                                  int max_side = 500) {
  using namespace trainbench;
  fused_crop_job j;
  j.width = 1 + static_cast<int>(rng() % static_cast<unsigned>(max_side));
  j.height = 1 + static_cast<int>(rng() % static_cast<unsigned>(max_side));
  j.channels = i % 5 == 4 ? 1 : 3;
  j.pitch = static_cast<std::int64_t>(j.width) * j.channels + static_cast<int>(rng() % 4);
  resize_plan plan;
  if (i % 4 == 3) {
    plan = eval_plan(j.height, j.width, size);
  } else {
    sample_rng sr(seed, 0, i);
    const crop_box box = random_resized_crop(j.height, j.width, sr);
    plan = train_plan(box, size, (rng() & 1) != 0);
  }
  j.plan = fused_plan(plan);
  return j;
}

}  // namespace tbgpu
