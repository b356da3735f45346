#pragma once
// A heartbeat beside the training thread, so that a lost host, link or process is noticed in
// seconds rather than after dist.timeout_s. A Gloo collective with a peer whose link is down
// never fails on its own: no connection is reset, the data just stops, and Gloo waits out its
// timeout. So every rank counts up a key of its own in the rendezvous store every beat, over a
// connection of its own, and reads everyone's counters; a peer whose counter stands still for
// dist.heartbeat_timeout_s is lost, and so is this rank when the store stops answering it.
// Waits on collectives ask for the verdict between slices of one beat (process_group::wait).
// No torch in this header; c10d in the .cpp.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainbench/distributed/host_address.hpp"
#include "trainbench/distributed/launch.hpp"

namespace trainbench {

struct peer_watch_settings {
  std::string key_prefix;  // the run's keys in the store (each run of a ladder has its own)
  std::vector<rank_host> hosts;
  std::chrono::milliseconds lost_after{10000};
  std::chrono::milliseconds connect_timeout{300000};  // dist.timeout_s: connecting to the store
};

// The key holding a rank's heartbeat count. Each rank creates its own at the rendezvous, before
// it announces itself, so every key exists once the watch starts.
std::string heartbeat_key(int rank);
// A rank whose run failed posts why under failed_key and counts up failures_key, so that ranks
// still waiting on it in a collective give up at once, naming it and its error.
std::string failed_key(int rank);
std::string failures_key();

// How often a watch with this window beats: a tenth of it, between 50 ms and 1 s.
std::chrono::milliseconds heartbeat_interval(std::chrono::milliseconds lost_after);

class peer_watch {
 public:
  peer_watch(const launch_info& launch, peer_watch_settings settings);
  ~peer_watch();  // stops the thread; waits at most one beat for it
  peer_watch(const peer_watch&) = delete;
  peer_watch& operator=(const peer_watch&) = delete;

  // Once a peer's count or the store has been silent for lost_after: who was lost (ranks and
  // hosts) and how. Empty while everyone answers.
  std::optional<std::string> verdict() const;
  // Ranks that posted their failure, with what they posted ("rank 1 (host h, a) failed: ..."):
  // read by the watch's thread, so asking costs the caller no trip to the store. Empty if none.
  std::string failed_peers() const;
  std::chrono::milliseconds interval() const;
  // `rank`'s heartbeat count as last read. A count that rises twice or more over a span shows a
  // live process (its training thread may still be blocked in a collective, not yet knowing of a
  // failure); a dead one's can rise once at most, by a last beat read late.
  std::int64_t beats(int rank) const;

  struct state;

 private:
  std::shared_ptr<state> state_;
};

}  // namespace trainbench
