#include <ATen/ATen.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <set>

#include "alloc_count.hpp"
#include "trainbench/data/loader.hpp"
#include "trainbench/measure/runner.hpp"

using namespace trainbench;

namespace {
// Sample i's first pixel is i * 7 mod 256, distinct for i < 37, so a batch tells which samples it holds.
std::shared_ptr<const dataset> indexed_dataset(int n) {
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(n) * 4 * 4 * 3);
  std::vector<int> labels(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    labels[static_cast<std::size_t>(i)] = i % 10;
    for (int k = 0; k < 48; ++k)
      pixels[static_cast<std::size_t>(i) * 48 + k] = static_cast<std::uint8_t>((i * 7 + k) % 256);
  }
  return std::make_shared<memory_dataset>("indexed", 4, 4, 3, 10, std::move(pixels), std::move(labels));
}

loader_options options(int workers, int batch = 5) {
  loader_options o;
  o.batch_size = batch;
  o.workers = workers;
  o.image_size = 4;
  o.raw_uint8 = true;  // raw pixels let the test identify samples exactly
  o.seed = 11;
  return o;
}

}  // namespace

TEST_CASE("every sample appears exactly once per epoch, for 0, 1 and 4 workers") {
  const int n = 36;  // i * 7 mod 256 is distinct for i < 37
  auto data = indexed_dataset(n);
  for (int workers : {0, 1, 4}) {
    INFO(workers << " workers");
    batch_loader loader(data, options(workers, 6));
    REQUIRE(loader.batches_per_epoch() == 6);
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::multiset<int> seen;
      for (int b = 0; b < 6; ++b) {
        const host_batch& batch = loader.next();
        CHECK(batch.index == epoch * 6 + b);
        const auto* p = batch.images.data_ptr<std::uint8_t>();
        for (std::int64_t i = 0; i < batch.count; ++i) seen.insert(p[i * 48]);
        loader.release(batch);
      }
      CHECK(seen.size() == static_cast<std::size_t>(n));
      CHECK(std::set<int>(seen.begin(), seen.end()).size() == static_cast<std::size_t>(n));
    }
  }
}

TEST_CASE("the same seed gives the same batches whatever the number of workers") {
  auto data = indexed_dataset(30);
  std::vector<std::vector<std::int64_t>> reference;
  for (int workers : {0, 1, 3}) {
    batch_loader loader(data, options(workers));
    std::vector<std::vector<std::int64_t>> got;
    for (int b = 0; b < 12; ++b) {
      const host_batch& batch = loader.next();
      std::vector<std::int64_t> labels(batch.labels.data_ptr<std::int64_t>(),
                                       batch.labels.data_ptr<std::int64_t>() + batch.count);
      got.push_back(labels);
      loader.release(batch);
    }
    if (reference.empty()) reference = got;
    CHECK(got == reference);
  }
  // A different seed shuffles differently.
  auto o = options(0);
  o.seed = 12;
  batch_loader other(data, o);
  const auto ours = batch_loader(data, options(0)).batch_indices(0);
  CHECK(other.batch_indices(0) != ours);
}

TEST_CASE("ranks read disjoint shards of every epoch") {
  auto data = indexed_dataset(30);
  std::set<std::int64_t> all;
  for (int rank = 0; rank < 3; ++rank) {
    auto o = options(0);
    o.rank = rank;
    o.world = 3;
    batch_loader loader(data, o);
    CHECK(loader.samples_per_epoch() == 10);
    for (std::int64_t b = 0; b < loader.batches_per_epoch(); ++b)
      for (auto i : loader.batch_indices(b)) CHECK(all.insert(i).second);
  }
  CHECK(all.size() == 30);
}

TEST_CASE("without drop_last the last batch of an epoch is short") {
  auto data = indexed_dataset(12);
  auto o = options(2);
  o.drop_last = false;
  batch_loader loader(data, o);
  CHECK(loader.batches_per_epoch() == 3);
  std::vector<std::int64_t> counts;
  for (int b = 0; b < 3; ++b) {
    const host_batch& batch = loader.next();
    counts.push_back(batch.count);
    loader.release(batch);
  }
  CHECK(counts == std::vector<std::int64_t>{5, 5, 2});
}

TEST_CASE("float batches: normalised NCHW or channels_last, labels int64") {
  auto data = indexed_dataset(10);
  auto o = options(1);
  o.raw_uint8 = false;
  o.image_size = 8;
  o.channels_last = true;
  batch_loader loader(data, o);
  const host_batch& b = loader.next();
  CHECK(b.images.sizes() == at::IntArrayRef({5, 3, 8, 8}));
  CHECK(b.images.is_contiguous(at::MemoryFormat::ChannelsLast));
  CHECK(b.labels.scalar_type() == at::kLong);
  CHECK(b.images.abs().max().item<float>() <= 1.0f + 1e-6f);
  loader.release(b);
}

TEST_CASE("buffers are reused: the ring never grows and no batch allocates") {
  auto data = indexed_dataset(20);
  std::atomic<int> ran{0};  // before the loader: its destructor may still run fences that count here
  batch_loader loader(data, options(2));
  CHECK(loader.slots() == 4);  // prefetch_factor 2 x 2 workers
  std::set<const void*> addresses;
  for (int b = 0; b < 200; ++b) {
    const host_batch& batch = loader.next();
    addresses.insert(batch.images.data_ptr());
    loader.release(batch);
  }
  CHECK(addresses.size() == 4);
  // Nor does the consumer's side allocate per batch: next(), and release() with a fence of the
  // size the CUDA stages hand it (a pointer and a number, kept inside the std::function).
  struct fence_of {
    std::atomic<int>* ran;
    std::int64_t batch;
    void operator()() const { ran->fetch_add(batch >= 0 ? 1 : 0); }
  };
  std::int64_t allocations = 0;
  {
    tbtest::thread_allocations counted;
    for (std::int64_t b = 0; b < 200; ++b) {
      const host_batch& batch = loader.next();
      loader.release(batch, fence_of{&ran, b});
    }
    allocations = counted.count();
  }
  CHECK(allocations == 0);
  CHECK(ran > 0);
}

TEST_CASE("clean shutdown mid-epoch, with batches held or in flight") {
  auto data = indexed_dataset(40);
  for (int workers : {1, 4}) {
    auto loader = std::make_unique<batch_loader>(data, options(workers));
    const host_batch& held = loader->next();
    (void)held;
    loader.reset();  // joins the workers while one batch is still held
    SUCCEED("no thread left blocked");
  }
  batch_loader loader(data, options(3));
  for (int b = 0; b < 3; ++b) loader.release(loader.next());
}

TEST_CASE("a fence given at release runs before the slot is refilled") {
  auto data = indexed_dataset(20);
  batch_loader loader(data, options(1));
  std::atomic<int> fenced{0};
  for (int b = 0; b < 10; ++b) loader.release(loader.next(), [&fenced] { ++fenced; });
  // Each refill waited on the fence of the batch that last used its slot.
  CHECK(fenced >= 10 - loader.slots());
}

namespace {
// Like the CUDA transfer: the fence it hands the loader points into the stage itself.
class fenced_transfer final : public transfer_stage {
 public:
  explicit fenced_transfer(std::shared_ptr<int> seen) : seen_(std::move(seen)) {}
  ~fenced_transfer() override { *alive_ = false; }
  void submit(const host_batch& batch, batch_loader& loader) override {
    loader.release(batch, [alive = alive_, seen = seen_] { *seen = *alive ? 1 : -1; });
  }
  device_batch take() override { return {}; }
  void step_done() override {}
  std::string describe() const override { return "fenced"; }

 private:
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::shared_ptr<int> seen_;
};
}  // namespace

TEST_CASE("a pipeline tears the loader down first, so a pending copy fence never outlives its transfer stage") {
  auto seen = std::make_shared<int>(0);
  {
    pipeline p;
    p.loader = std::make_unique<batch_loader>(indexed_dataset(20), options(0));
    p.transfer = std::make_unique<fenced_transfer>(seen);
    p.transfer->submit(p.loader->next(), *p.loader);
  }
  CHECK(*seen == 1);  // -1: the loader's destructor ran the fence after the stage was gone
}

TEST_CASE("a dataset smaller than one batch is an input error") {
  auto data = indexed_dataset(3);
  CHECK_THROWS_WITH(batch_loader(data, options(0)), Catch::Contains("fewer than one batch"));
}
