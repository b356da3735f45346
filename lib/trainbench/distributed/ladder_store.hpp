#pragma once
// Under torchrun or srun a ladder starts one run per rung and round on every rank; those runs
// rendezvous through a store that outlives each of them (no torch here; c10d in the .cpp).
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "trainbench/distributed/launch.hpp"

namespace trainbench {

// The bounds of the store's waits; 0 takes the default (the tests shorten them).
struct ladder_store_bounds {
  std::chrono::milliseconds wait{0};                  // for the other ranks: 5 minutes
  std::chrono::milliseconds heartbeat_lost_after{0};  // a silent peer, or one store call: 30 s
};

class ladder_store {
 public:
  // On rank 0, serves the store at MASTER_ADDR:MASTER_PORT for the ladder's lifetime, unless
  // torchrun's agent serves one already; nothing on other ranks or without a launcher.
  // Other ranks (and rank 0 under torchrun's agent store) connect to it, to agree on each run.
  // Every rank waits here for all the others (at most 5 minutes), then beats a heartbeat of its
  // own in the store for as long as it lives (peer_watch), so a waiting rank learns within 30 s
  // that a peer, its host or the store is gone. Every call on the store is bounded (call_within):
  // over a link that is down, c10d's own calls block for about 15 minutes.
  explicit ladder_store(const launch_info& launch);
  ladder_store(const launch_info& launch, const ladder_store_bounds& bounds);
  ~ladder_store();

  // Every rank posts how its run of `step` ended (an exit code) and gets every rank's, by rank,
  // so that all ranks take the same decision about the next runs (a run that failed on one rank
  // is not run again on any). Without a launcher: {code}. A rank whose heartbeat stands still
  // for 30 s, or that does not post within 5 minutes, fails the others with a run_error naming it;
  // so does a store that does not answer within 30 s.
  std::vector<int> agree(const std::string& step, int code);
  // Called once the ladder is done with the store, interrupted or not. Every rank says it has
  // left; rank 0, when it serves the store, waits until all have (at most a minute, or 5 s when
  // interrupted), because a rank may still be reading the last agreement when rank 0 is through
  // with it, and a store that closes under that read fails a rank whose runs all went well.
  // Never throws: the results are complete.
  void finish(bool interrupted);
  ladder_store(const ladder_store&) = delete;
  ladder_store& operator=(const ladder_store&) = delete;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  launch_info launch_;
};

}  // namespace trainbench
