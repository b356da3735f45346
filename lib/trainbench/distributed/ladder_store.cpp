// The store a ladder's ranks (and `run --processes` under a launcher) agree through, process by
// process; its waits are bounded and watched by a heartbeat of their own.
#include "trainbench/distributed/ladder_store.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "trainbench/distributed/c10d_state.hpp"
#include "trainbench/distributed/peer_watch.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/log.hpp"

namespace trainbench {

namespace {

// How long the ranks wait for each other at an agreement (a peer's process may still be
// tearing down a run) and at the start.
constexpr std::chrono::minutes ladder_timeout{5};
// A peer ladder whose heartbeat stands still this long is gone; so is the store when one call
// on it is not answered in this time.
constexpr std::chrono::seconds ladder_heartbeat_lost_after{30};

std::vector<std::uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::string seconds_text(std::chrono::milliseconds t) {
  return std::to_string(static_cast<long long>(t.count() / 1000)) + " s";
}

}  // namespace

struct ladder_store::impl {
  c10::intrusive_ptr<c10d::Store> store;
  std::string prefix;
  std::unique_ptr<peer_watch> watch;
  std::chrono::milliseconds wait_limit{ladder_timeout};
  std::chrono::milliseconds call_limit{ladder_heartbeat_lost_after};
  bool lost = false;  // a call was left blocked: the store is not asked again
};

ladder_store::ladder_store(const launch_info& launch) : ladder_store(launch, ladder_store_bounds{}) {}

ladder_store::ladder_store(const launch_info& launch, const ladder_store_bounds& bounds) : launch_(launch) {
  if (launch.launcher == "none") return;
  launch_info server = launch;
  server.store_prefix.clear();  // rank 0 serves (unless torchrun's agent does); its runs connect
  impl_ = std::make_unique<impl>();
  if (bounds.wait.count() > 0) impl_->wait_limit = bounds.wait;
  if (bounds.heartbeat_lost_after.count() > 0) impl_->call_limit = bounds.heartbeat_lost_after;
  impl_->store = open_tcp_store(server, impl_->wait_limit);
  // torchrun's agent store keeps an earlier attempt's keys: each attempt agrees under its own.
  const std::string base = launch.agent_store ? "/worker/trainbench/ladder" : "trainbench/ladder";
  const std::string where = launch.master_addr + ":" + std::to_string(launch.master_port);
  const std::string me = "rank " + std::to_string(launch.rank);
  std::string attempt;
  try {
    const auto store = impl_->store;
    const std::string starts = base + "/starts/" + std::to_string(launch.rank);
    auto n = std::make_shared<std::int64_t>(0);
    if (!call_within([store, starts, n] { *n = store->add(starts, 1); }, impl_->call_limit))
      throw run_error("dist", me + ": the rendezvous store at " + where + " did not answer within " +
                                  seconds_text(impl_->call_limit));
    attempt = base + "/attempt_" + std::to_string(*n);
    impl_->prefix = attempt + "/";
    // Every rank's heartbeat key exists before any watch reads them.
    const auto beats = c10::make_intrusive<c10d::PrefixStore>(attempt, store);
    const std::string mine = heartbeat_key(launch.rank);
    if (!call_within([beats, mine] { beats->add(mine, 1); }, impl_->call_limit))
      throw run_error("dist", me + ": the rendezvous store at " + where + " did not answer within " +
                                  seconds_text(impl_->call_limit));
    std::vector<std::string> keys;
    for (int r = 0; r < launch.world; ++r) keys.push_back(heartbeat_key(r));
    const auto got = wait_for_keys(beats, keys, std::chrono::steady_clock::now() + impl_->wait_limit,
                                   impl_->call_limit);
    if (got != key_wait::ready)
      throw run_error("dist", me + ": " +
                                  (got == key_wait::timed_out
                                       ? "not every rank started within " + seconds_text(impl_->wait_limit)
                                       : "the rendezvous store at " + where + " did not answer within " +
                                             seconds_text(impl_->call_limit)));
  } catch (const run_error&) {
    throw;
  } catch (const std::exception& e) {
    throw run_error("dist", me + " could not use the rendezvous store at " + where + ": " + store_error_text(e));
  }
  try {
    impl_->watch = std::make_unique<peer_watch>(
        launch, peer_watch_settings{attempt, {}, impl_->call_limit, impl_->wait_limit});
  } catch (const std::exception& e) {
    throw run_error("dist", me + ": the ladder's heartbeat could not connect to the rendezvous store at " + where +
                                ": " + store_error_text(e));
  }
}

std::vector<int> ladder_store::agree(const std::string& step, int code) {
  if (!impl_) return {code};
  const auto store = impl_->store;
  const auto key = [&](int rank) { return impl_->prefix + step + "/exit/" + std::to_string(rank); };
  std::vector<std::string> keys;
  for (int r = 0; r < launch_.world; ++r) keys.push_back(key(r));
  const std::string failed = "rank " + std::to_string(launch_.rank) + ": the ranks could not agree on how " + step +
                             " ended";
  if (impl_->lost) throw run_error("dist", failed + ": the rendezvous store stopped answering earlier");
  std::string why;
  try {
    const std::string mine = key(launch_.rank), value = std::to_string(code);
    if (!call_within([store, mine, value] { store->set(mine, bytes_of(value)); }, impl_->call_limit)) {
      impl_->lost = true;
      throw run_error("dist", failed + ": the rendezvous store did not take this rank's within " +
                                  seconds_text(impl_->call_limit));
    }
    // A peer that is gone is named as soon as its heartbeat has stood still long enough.
    const auto watched = [&] {
      if (auto lost = impl_->watch->verdict()) throw run_error("dist", failed + ": " + *lost);
    };
    const auto got = wait_for_keys(store, keys, std::chrono::steady_clock::now() + impl_->wait_limit,
                                   impl_->call_limit, watched);
    if (got == key_wait::ready) {
      auto values = std::make_shared<std::vector<std::vector<std::uint8_t>>>();
      if (call_within([store, keys, values] { *values = store->multiGet(keys); }, impl_->call_limit)) {
        std::vector<int> out;
        for (const auto& v : *values) out.push_back(std::stoi(std::string(v.begin(), v.end())));
        return out;
      }
      impl_->lost = true;
      why = "the rendezvous store did not answer within " + seconds_text(impl_->call_limit);
    } else if (got == key_wait::unreachable) {
      impl_->lost = true;
      why = "the rendezvous store did not answer within " + seconds_text(impl_->call_limit);
    } else {
      why = "not every rank said within " + seconds_text(impl_->wait_limit);
    }
  } catch (const run_error&) {
    throw;
  } catch (const std::exception& e) {
    why = store_error_text(e);
  }
  std::string missing;
  if (!impl_->lost) {
    auto present = std::make_shared<std::vector<bool>>();
    const bool answered = call_within(
        [store, keys, present] {
          for (const auto& k : keys) present->push_back(store->check({k}));
        },
        impl_->call_limit);
    if (answered)
      for (std::size_t r = 0; r < present->size(); ++r)
        if (!(*present)[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  throw run_error("dist", failed + (missing.empty() ? "" : " (rank(s) " + missing + " did not say)") + ": " + why);
}

void ladder_store::finish(bool interrupted) {
  if (!impl_) return;
  const auto store = impl_->store;
  const auto left = [&](int rank) { return impl_->prefix + "left/" + std::to_string(rank); };
  const std::string me = "rank " + std::to_string(launch_.rank);
  const auto warn = [&](const std::string& why) {
    log_warn(me + ": not every rank said it was done with the ladder's store (" + why +
             "); a rank still reading it when this one exits may fail");
  };
  if (impl_->lost) return warn("the store stopped answering earlier");
  try {
    const std::string mine = left(launch_.rank);
    if (!call_within([store, mine] { store->set(mine, bytes_of("1")); }, impl_->call_limit))
      return warn("the store did not answer within " + seconds_text(impl_->call_limit));
    if (launch_.rank != 0 || launch_.agent_store) return;  // torchrun's agent outlives the ranks
    std::vector<std::string> keys;
    for (int r = 1; r < launch_.world; ++r) keys.push_back(left(r));
    if (keys.empty()) return;
    const auto limit = interrupted ? std::chrono::milliseconds(5000) : std::chrono::milliseconds(60000);
    const auto got = wait_for_keys(store, keys, std::chrono::steady_clock::now() + limit, impl_->call_limit);
    if (got != key_wait::ready) warn(got == key_wait::timed_out ? "waited " + seconds_text(limit) : "the store did not answer");
  } catch (const std::exception& e) {
    warn(store_error_text(e));
  }
}

ladder_store::~ladder_store() = default;

}  // namespace trainbench
