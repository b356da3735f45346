#pragma once
// train.batch_size: auto, the search itself: powers of two from 8 until one does not fit, then a
// binary search between the last fit and the first failure. The tries (cuda/batch_search.cpp)
// run real steps, which reseed and draw from the random generators; the search hands every
// generator back as it found it, so the run after it starts from the profile's seed exactly as
// a run given the found batch size explicitly.
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace trainbench {

using batch_fits = std::function<bool(std::int64_t batch)>;

// The largest batch that fits (within about 1.5% of the first failure, up to 65536); every try
// is recorded in `trials` as (batch, fitted). Throws run_error when not even 8 fit.
std::int64_t search_largest_batch(const batch_fits& fits, std::vector<std::pair<std::int64_t, bool>>& trials);

}  // namespace trainbench
