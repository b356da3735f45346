#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include "trainbench/measure/batch_search.hpp"
#include "trainbench/util/error.hpp"

using namespace trainbench;

TEST_CASE("batch-size search: powers of two, then bisection to within 1.5%") {
  std::vector<std::pair<std::int64_t, bool>> trials;
  const std::int64_t found = search_largest_batch([](std::int64_t b) { return b <= 300; }, trials);
  CHECK(found <= 300);
  CHECK(found >= 300 - 300 / 64);
  REQUIRE(trials.size() >= 7);
  const std::vector<std::pair<std::int64_t, bool>> doubling{{8, true},   {16, true},  {32, true},  {64, true},
                                                            {128, true}, {256, true}, {512, false}};
  CHECK(std::vector<std::pair<std::int64_t, bool>>(trials.begin(), trials.begin() + 7) == doubling);
  for (const auto& [batch, fitted] : trials) CHECK(fitted == (batch <= 300));

  trials.clear();
  CHECK_THROWS_AS(search_largest_batch([](std::int64_t) { return false; }, trials), run_error);
}

// The tries build models and draw data after reseeding; the run after the search must start from
// the profile's seed as if the batch size had been given (the weights and device-synthetic data
// of `batch_size: auto` used to depend on how many tries the search made).
TEST_CASE("batch-size search hands the random generators back as it found them") {
  at::manual_seed(1234);
  const at::Tensor expected = at::randn({16});
  at::manual_seed(1234);
  std::vector<std::pair<std::int64_t, bool>> trials;
  const auto fits = [](std::int64_t b) {
    at::manual_seed(0);  // what each try does before building its model
    (void)at::randn({b});
    return b <= 100;
  };
  search_largest_batch(fits, trials);
  REQUIRE(trials.size() > 3);
  CHECK(at::equal(at::randn({16}), expected));
}
