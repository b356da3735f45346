#include "trainbench/distributed/peer_watch.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace trainbench {

using clock_type = std::chrono::steady_clock;

std::string heartbeat_key(int rank) { return "trainbench/heartbeat/" + std::to_string(rank); }
std::string failed_key(int rank) { return "trainbench/failed/" + std::to_string(rank); }
std::string failures_key() { return "trainbench/failures"; }

std::chrono::milliseconds heartbeat_interval(std::chrono::milliseconds lost_after) {
  return std::clamp(lost_after / 10, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
}

struct peer_watch::state {
  launch_info launch;
  peer_watch_settings settings;
  std::chrono::milliseconds interval{1000};
  // A connection of the watch's own, under the run's prefix. Owned, never destroyed: the thread
  // may still be inside it when the process exits (see ~peer_watch).
  c10d::Store* store = nullptr;

  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  bool done = false;                          // run() returned
  clock_type::time_point last_contact;        // the store last answered this rank
  std::vector<std::int64_t> counts;           // each rank's heartbeat count, as last read
  std::vector<clock_type::time_point> moved;  // when each count last changed
  std::int64_t failures = 0;                  // failures_key, as last read
  std::string failed;                         // what the ranks that failed posted

  void run();
  bool beat(std::vector<std::int64_t>& read) const;
  void read_failures();
};

namespace {

std::string seconds(std::chrono::milliseconds t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(t.count()) / 1000.0);
  return buf;
}

std::int64_t as_count(const std::vector<std::uint8_t>& bytes) {
  try {
    return std::stoll(std::string(bytes.begin(), bytes.end()));
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

// One beat: count up this rank's key, read everyone's (every key exists since the rendezvous).
bool peer_watch::state::beat(std::vector<std::int64_t>& read) const {
  try {
    store->add(heartbeat_key(launch.rank), 1);
    std::vector<std::string> keys;
    for (int r = 0; r < launch.world; ++r) keys.push_back(heartbeat_key(r));
    read.clear();
    for (const auto& value : store->multiGet(keys)) read.push_back(as_count(value));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// Only when the count moved: the peers' messages cost a trip per rank.
void peer_watch::state::read_failures() {
  std::int64_t now_failed = 0;
  std::string text;
  try {
    now_failed = store->add(failures_key(), 0);
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (now_failed == failures) return;
    }
    for (int r = 0; r < launch.world; ++r) {
      if (r == launch.rank || !store->check({failed_key(r)})) continue;
      const auto bytes = store->get(failed_key(r));
      text += (text.empty() ? "" : "; ") + rank_at(r, settings.hosts) + " failed: " + std::string(bytes.begin(), bytes.end());
    }
  } catch (const std::exception&) {
    return;  // the heartbeat's own calls say whether the store is gone
  }
  std::lock_guard<std::mutex> lock(mutex);
  failures = now_failed;
  failed = text;
}

// A store that failed once is gone (c10d's connection broke: the server closed it or the kernel
// gave up on the link), so the watch stops beating and its silence becomes the verdict.
void peer_watch::state::run() {
  std::vector<std::int64_t> read;
  std::unique_lock<std::mutex> lock(mutex);
  while (!stop) {
    lock.unlock();
    const bool answered = beat(read);
    if (answered) read_failures();
    const auto now = clock_type::now();
    lock.lock();
    if (!answered) break;
    last_contact = now;
    for (std::size_t r = 0; r < read.size() && r < counts.size(); ++r)
      if (read[r] != counts[r]) {
        counts[r] = read[r];
        moved[r] = now;
      }
    wake.wait_for(lock, interval, [&] { return stop; });
  }
  done = true;
  wake.notify_all();
}

peer_watch::peer_watch(const launch_info& launch, peer_watch_settings settings) : state_(std::make_shared<state>()) {
  state& s = *state_;
  s.launch = launch;
  s.settings = std::move(settings);
  s.interval = heartbeat_interval(s.settings.lost_after);
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(launch.master_port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = s.settings.connect_timeout;
  auto tcp = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, o);
  s.store = c10::make_intrusive<c10d::PrefixStore>(s.settings.key_prefix, tcp).release();
  const auto now = clock_type::now();
  s.last_contact = now;
  s.counts.assign(static_cast<std::size_t>(launch.world), -1);
  s.moved.assign(static_cast<std::size_t>(launch.world), now);
  std::thread([shared = state_] { shared->run(); }).detach();
}

// c10d bounds a store's wait() by its timeout, but not add(): over a link that is down, add()
// waits until the kernel gives up on the connection (many minutes). So the thread is detached:
// normally it is waiting for its next beat and ends at once; stuck in add(), it is left to the
// process's exit, which ends it where it waits. It shares its state, and its connection is never
// destroyed, so nothing it holds goes away under it.
peer_watch::~peer_watch() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->stop = true;
  state_->wake.notify_all();
  state_->wake.wait_for(lock, state_->interval, [&] { return state_->done; });
}

std::chrono::milliseconds peer_watch::interval() const { return state_->interval; }

std::int64_t peer_watch::beats(int rank) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const auto r = static_cast<std::size_t>(rank);
  return r < state_->counts.size() ? state_->counts[r] : 0;
}

std::string peer_watch::failed_peers() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->failed;
}

std::optional<std::string> peer_watch::verdict() const {
  const state& s = *state_;
  const auto& hosts = s.settings.hosts;
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto now = clock_type::now();
  const auto window = s.settings.lost_after;
  // The store's silence explains the peers' silence too: a peer is lost only when its count stood
  // still for a whole window while this rank still heard from the store.
  if (now - s.last_contact > window)
    return "the rendezvous store at " + s.launch.master_addr + ":" + std::to_string(s.launch.master_port) +
           ", on the host of " + rank_at(0, hosts) + ", did not answer for " + seconds(window) +
           ": this host's link, or that host, is down";
  std::string lost;
  int n = 0;
  for (int r = 0; r < s.launch.world; ++r) {
    if (r == s.launch.rank || s.last_contact - s.moved[static_cast<std::size_t>(r)] <= window) continue;
    lost += (lost.empty() ? "" : ", ") + rank_at(r, hosts);
    ++n;
  }
  if (lost.empty()) return std::nullopt;
  return lost + " sent no heartbeat for " + seconds(window) +
         (n == 1 ? ": its host, its link or its process is gone" : ": their hosts, links or processes are gone") +
         " (or stopped)";
}

}  // namespace trainbench
