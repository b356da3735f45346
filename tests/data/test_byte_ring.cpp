// The bounded ring for compressed file bytes (data/byte_ring.hpp): it never holds more than its
// capacity, reuses memory once the consumer released it, hands out turns in batch order, and a
// producer with no room waits (for the consumer, or on the oldest block's fence) instead of
// growing. No sleeps: a blocked thread is seen through waiting(), and let go by the test.
#include <catch2/catch.hpp>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "alloc_count.hpp"
#include "trainbench/data/byte_ring.hpp"

using namespace trainbench;

namespace {

// Spins (yielding) until `n` threads are blocked in the ring: they are then known to wait.
void until_waiting(const byte_ring& ring, int n) {
  while (ring.waiting() != n) std::this_thread::yield();
}

}  // namespace

TEST_CASE("the byte ring hands out blocks within its capacity and reuses released memory", "[ring]") {
  std::vector<std::uint8_t> memory(1000);
  byte_ring ring(memory.data(), memory.size());
  const auto a = ring.acquire(0, 400);
  const auto b = ring.acquire(1, 400);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a.data == memory.data());
  CHECK(b.offset == 400);
  CHECK(ring.held() == 800);
  ring.release(a, {});  // nothing left to wait for: taken back at once
  ring.release(b, {});
  const auto c = ring.acquire(2, 700);
  REQUIRE(c);
  CHECK(c.offset + c.size <= 1000);
  CHECK(ring.held() == 700);
  CHECK(ring.peak_held() <= ring.capacity());
  // Larger than the ring: an empty block, at once, and the turn passes on.
  CHECK_FALSE(ring.acquire(3, 1001));
  ring.release(c, {});
  CHECK(ring.acquire(4, 1000));
  CHECK(ring.peak_held() == 1000);
}

TEST_CASE("a full byte ring runs the oldest released block's fence, once, instead of growing", "[ring]") {
  std::vector<std::uint8_t> memory(1000);
  byte_ring ring(memory.data(), memory.size());
  int fenced_a = 0, fenced_b = 0;
  const auto a = ring.acquire(0, 600);
  ring.release(a, [&] { ++fenced_a; });
  const auto b = ring.acquire(1, 300);  // fits beside a: a's fence is not run
  CHECK(fenced_a == 0);
  ring.release(b, [&] { ++fenced_b; });
  const auto c = ring.acquire(2, 500);  // needs a's room: its fence runs, b's does not
  REQUIRE(c);
  CHECK(fenced_a == 1);
  CHECK(fenced_b == 0);
  CHECK(c.offset == 0);  // wrapped to the start, where a was
  CHECK(ring.fences_run() == 1);
  CHECK(ring.held() == 800);
}

TEST_CASE("a producer with no room waits for the consumer's release, then reuses the memory", "[ring]") {
  std::vector<std::uint8_t> memory(1000);
  byte_ring ring(memory.data(), memory.size());
  const auto first = ring.acquire(0, 600);
  byte_ring::block second;
  std::thread producer([&] { second = ring.acquire(1, 600); });
  until_waiting(ring, 1);  // blocked: the consumer still holds the first block
  bool fenced = false;
  ring.release(first, [&] { fenced = true; });
  producer.join();
  REQUIRE(second);
  CHECK(fenced);
  CHECK(second.offset == 0);
  CHECK(ring.held() == 600);
}

TEST_CASE("byte ring turns go in ticket order, and close() lets every waiter go", "[ring]") {
  std::vector<std::uint8_t> memory(1000);
  byte_ring ring(memory.data(), memory.size());
  byte_ring::block later;
  std::thread early([&] { later = ring.acquire(1, 100); });  // ticket 1 before ticket 0
  until_waiting(ring, 1);
  const auto first = ring.acquire(0, 100);
  early.join();
  REQUIRE(first);
  REQUIRE(later);
  CHECK(first.offset == 0);  // ticket 0 was served first
  CHECK(later.offset == 100);
  // Closing wakes a producer waiting for room and one waiting for its turn.
  const auto big = ring.acquire(2, 800);
  REQUIRE(big);
  byte_ring::block no_room, no_turn;
  std::thread t3([&] { no_room = ring.acquire(3, 500); });
  std::thread t4([&] { no_turn = ring.acquire(4, 10); });
  until_waiting(ring, 2);
  ring.close();
  t3.join();
  t4.join();
  CHECK_FALSE(no_room);
  CHECK_FALSE(no_turn);
}

// A producer and a consumer through a small ring: blocks of mixed sizes wrap around many times;
// no two blocks the consumer holds overlap, every block's bytes arrive intact, and the ring never
// holds more than its capacity.
TEST_CASE("byte ring under a producer and a consumer: no overlap, no corruption, bounded", "[ring]") {
  std::vector<std::uint8_t> memory(4096);
  byte_ring ring(memory.data(), memory.size());
  constexpr int batches = 2000;
  std::vector<byte_ring::block> queue(batches);
  std::atomic<int> produced{0};
  std::atomic<int> fences{0};
  std::thread producer([&] {
    for (int t = 0; t < batches; ++t) {
      const std::size_t size = 1 + static_cast<std::size_t>((t * 7919) % 1500);
      byte_ring::block b = ring.acquire(t, size);
      if (!b) return;
      for (std::size_t i = 0; i < b.size; ++i) b.data[i] = static_cast<std::uint8_t>(t + i);
      queue[static_cast<std::size_t>(t)] = b;
      produced.store(t + 1, std::memory_order_release);
    }
  });
  bool intact = true;
  for (int t = 0; t < batches; ++t) {
    while (produced.load(std::memory_order_acquire) <= t) std::this_thread::yield();
    const byte_ring::block b = queue[static_cast<std::size_t>(t)];
    if (b.offset + b.size > memory.size()) intact = false;
    for (std::size_t i = 0; i < b.size; ++i)
      if (b.data[i] != static_cast<std::uint8_t>(t + i)) intact = false;
    ring.release(b, [&] { fences.fetch_add(1); });
  }
  producer.join();
  CHECK(intact);
  CHECK(ring.peak_held() <= memory.size());
  CHECK(ring.fences_run() == fences.load());
  CHECK(fences.load() > 0);  // the ring filled up and took memory back through fences
}

// Performance habit: no allocation per batch after warmup. The ring's queue of blocks is reused
// (it grows only to the most blocks ever held at once), and a fence that holds a pointer and a
// batch number, as the nvJPEG stage's does, is kept inside the std::function.
TEST_CASE("a byte ring in a steady loop allocates nothing on the consumer's thread", "[ring]") {
  std::vector<std::uint8_t> memory(1000);
  byte_ring ring(memory.data(), memory.size());
  struct fence_of {
    std::int64_t* ran;
    std::int64_t batch;
    void operator()() const { *ran += batch >= 0 ? 1 : 0; }
  };
  std::int64_t ran = 0, empty = 0, t = 0;
  // Blocks of 90 to 150 bytes: about eight held at once, each taken back by running its fence.
  auto cycle = [&] {
    const auto b = ring.acquire(t, static_cast<std::size_t>(90 + t % 7 * 10));
    if (!b) ++empty;
    ring.release(b, fence_of{&ran, t});
    ++t;
  };
  while (t < 100) cycle();
  std::int64_t allocations = 0;
  {
    tbtest::thread_allocations counted;
    while (t < 1100) cycle();
    allocations = counted.count();
  }
  CHECK(empty == 0);
  CHECK(ran > 1000);
  CHECK(allocations == 0);
}
