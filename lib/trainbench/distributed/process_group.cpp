#include "trainbench/distributed/process_group.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "trainbench/distributed/c10d_state.hpp"
#include "trainbench/distributed/peer_watch.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/interrupt.hpp"
#include "trainbench/util/log.hpp"

#include <cmath>
#include <cstdlib>
#include <exception>
#include <thread>

namespace trainbench {

namespace {

std::string error_text(const std::exception& e) { return store_error_text(e); }

std::string seconds(std::chrono::milliseconds t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(t.count()) / 1000.0);
  return buf;
}

using clock_type = std::chrono::steady_clock;

std::string joined_key(int rank) { return "trainbench/joined/" + std::to_string(rank); }
std::string host_key(int rank) { return "trainbench/host/" + std::to_string(rank); }
std::string outcome_key(int rank) { return "trainbench/outcome/" + std::to_string(rank); }

// Rounded up: c10d reads 0 ms as "no timeout", so 0.0004 s must not become 0.
std::chrono::milliseconds milliseconds(double s) {
  return std::chrono::milliseconds(std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(s * 1000))));
}

// Waits on the host end in slices this long, to check for a signal, a lost or failed peer.
constexpr std::chrono::milliseconds slice_without_watch{200};

std::vector<std::uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// "ok" or "failed", a line of numbers, then the error (which may hold newlines).
std::string encode_outcome(const rank_outcome& o) {
  std::string out = o.failed ? "failed\n" : "ok\n";
  for (double v : o.packed) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g ", v);
    out += buf;
  }
  return out + "\n" + o.error;
}

rank_outcome decode_outcome(const std::vector<std::uint8_t>& bytes) {
  const std::string text(bytes.begin(), bytes.end());
  const std::size_t first = text.find('\n'), second = text.find('\n', first + 1);
  TB_ASSERT(first != std::string::npos && second != std::string::npos, "a rank posted a malformed outcome");
  rank_outcome o;
  o.failed = text.compare(0, first, "failed") == 0;
  const std::string numbers = text.substr(first + 1, second - first - 1);
  const char* p = numbers.c_str();
  for (char* end = nullptr;; p = end) {
    const double v = std::strtod(p, &end);
    if (end == p) break;
    o.packed.push_back(v);
  }
  o.error = text.substr(second + 1);
  return o;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

c10::intrusive_ptr<c10d::Store> open_tcp_store(const launch_info& l, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(l.master_port);
  o.isServer = l.rank == 0 && !l.agent_store && l.store_prefix.empty();
  o.numWorkers = l.world;
  o.waitWorkers = false;  // the join check below names who is missing, TCPStore would only count
  o.timeout = timeout;
  o.multiTenant = true;
  try {
    return c10::make_intrusive<c10d::TCPStore>(l.master_addr, o);
  } catch (const std::exception& e) {
    const std::string who = o.isServer
                                ? "could not serve the rendezvous store on port "
                                : "could not reach the rendezvous store (served by rank 0) at " + l.master_addr + ":";
    throw run_error("dist", "rank " + std::to_string(l.rank) + " " + who + std::to_string(l.master_port) + " within " +
                                seconds(timeout) + ": " + error_text(e));
  }
}

namespace {

// The run's keys live under `prefix` (set here), which the heartbeat's own connection uses too.
c10::intrusive_ptr<c10d::Store> connect_store(const launch_info& l, std::chrono::milliseconds timeout,
                                              std::string& prefix) {
  // One store per process, as torch.distributed keeps one: rank 0 serves it until it exits, so
  // a rank that starts its next run (a ladder's next rung) early never meets a server going away.
  // Deliberately never destroyed.
  static auto* tcp = new c10::intrusive_ptr<c10d::Store>();
  if (!*tcp) *tcp = open_tcp_store(l, timeout);
  // Each group of this process (one per run) gets its own keys; every rank makes its groups in
  // the same order, so the numbers agree.
  static int groups_made = 0;
  const std::string group = (l.agent_store ? "/worker/trainbench" : "trainbench") +
                            (l.store_prefix.empty() ? "" : "/" + l.store_prefix) + "/group_" +
                            std::to_string(groups_made++);
  // torchrun's agent store outlives restarts, and the keys of a stopped attempt stay in it. The
  // attempt is not TORCHELASTIC_RESTART_COUNT: an agent that restarts its workers because another
  // node's failed does not count that restart, so the count differs between nodes. But torchrun
  // stops every worker before it starts the next attempt and starts every rank in each one, so
  // the n-th process to be rank r belongs with the n-th of every other rank: the store counts them.
  std::int64_t attempt = 1;
  try {
    attempt = (*tcp)->add(group + "/starts/" + std::to_string(l.rank), 1);
  } catch (const std::exception& e) {
    throw run_error("dist", "rank " + std::to_string(l.rank) + " could not use the rendezvous store at " +
                                l.master_addr + ":" + std::to_string(l.master_port) + ": " + error_text(e));
  }
  prefix = group + "/attempt_" + std::to_string(attempt);
  return c10::make_intrusive<c10d::PrefixStore>(prefix, *tcp);
}

}  // namespace

process_group::process_group(const launch_info& launch, const dist_config& dist, c10::Device device)
    : launch_(launch),
      device_(device),
      timeout_(milliseconds(dist.timeout_s)),
      state_(std::make_unique<process_group_state>()) {
  dist_backend backend = dist.backend;
  if (backend == dist_backend::automatic) backend = device.is_cuda() ? dist_backend::nccl : dist_backend::gloo;
  if (backend == dist_backend::nccl && !device.is_cuda())
    throw config_error("", "dist.backend",
                       "'nccl' needs a CUDA device, and this run's device is " + device.str() + "; use gloo (or auto)");
  backend_name_ = to_string(backend);
  const bool gloo = backend == dist_backend::gloo;
  gloo_choice devices;
  if (gloo) devices = choose_gloo_devices(process_environment());
  rank_host mine{this_host_name(), ""};
  for (const auto& a : devices.addresses) mine.address += (mine.address.empty() ? "" : ",") + a;
  std::string prefix;
  state_->store = connect_store(launch_, timeout_, prefix);
  rendezvous(timeout_, mine);
  if (gloo) {
    check_gloo_addresses(hosts_);
    log_info(who() + ": Gloo on " + mine.address + " (" + devices.how + ")");
  }
  if (gloo && dist.heartbeat_timeout_s > 0) try {
      watch_ = std::make_unique<peer_watch>(
          launch_, peer_watch_settings{prefix, hosts_, milliseconds(dist.heartbeat_timeout_s), timeout_});
    } catch (const std::exception& e) {
      throw run_error("dist", who() + ": the heartbeat could not connect to the rendezvous store at " +
                                  launch_.master_addr + ":" + std::to_string(launch_.master_port) + ": " +
                                  error_text(e));
    }
  try {
    state_->backend = gloo ? make_gloo_backend(state_->store, rank(), world(), timeout_, devices)
                           : make_nccl_backend(state_->store, rank(), world(), device, timeout_);
  } catch (const config_error&) {
    throw;
  } catch (const std::exception& e) {
    throw run_error("dist", who() + ": creating the " + backend_name_ + " process group failed: " + error_text(e));
  }
}

process_group::~process_group() {
  try {
    // Destroyed while an exception unwinds (an interrupt, an out-of-memory error, a data error),
    // an all-reduce may still be queued on the stream with a lost peer: NCCL's shutdown() would
    // wait for it, abort() does not.
    if (std::uncaught_exceptions() > 0) failed_ = true;
    shutdown();
  } catch (...) {
    // shutdown() reports its own failures; nothing may leave a destructor.
  }
  // A failed collective may leave Gloo's worker threads waiting on a lost peer until its timeout,
  // and the backend's destructor joins them: leave it (and them) to the process's exit.
  if (failed_ && host_blocking() && state_->backend) (void)state_->backend.release();
}

// What torch.distributed.destroy_process_group() does for the backend. ProcessGroupNCCL's
// shutdown() finishes the queued collectives and destroys its communicators; destroyed without
// it, it aborts them and warns "destroy_process_group() was not called before program exit".
// After a failure (a collective left unfinished, a peer lost) NCCL's communicators are aborted
// instead, which returns without waiting on the peers. Gloo's shutdown() has nothing to do, and
// a failed Gloo group is left alone (see the destructor).
void process_group::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (!state_->backend || (failed_ && host_blocking())) return;
  try {
    if (failed_)
      state_->backend->abort();
    else
      state_->backend->shutdown();
  } catch (const std::exception& e) {
    log_warn(who() + ": shutting the " + backend_name_ + " process group down failed: " + error_text(e));
    if (!failed_) {
      try {
        state_->backend->abort();  // else its destructor warns and aborts anyway
      } catch (...) {
      }
    }
  }
}

void process_group::check_open(const std::string& what) const {
  if (shut_down_) throw run_error("dist", who() + ": " + what + " after the process group was shut down");
}

std::string process_group::who() const {
  const std::string at = rank_at(rank(), hosts_);  // "rank R (host H, A)"
  const std::size_t space = at.find(' ', 5);
  return "rank " + std::to_string(rank()) + " of " + std::to_string(world()) +
         (space == std::string::npos ? "" : at.substr(space));
}

// Each rank announces itself with its host, then waits for all the others; on timeout it can say
// who is missing. Its heartbeat key exists from here on, so the watch can read every rank's.
void process_group::rendezvous(std::chrono::milliseconds timeout, const rank_host& mine) {
  std::vector<std::string> keys, host_keys;
  for (int r = 0; r < world(); ++r) {
    keys.push_back(joined_key(r));
    host_keys.push_back(host_key(r));
  }
  bool timed_out = false;
  try {
    const auto store_ptr = state_->store;
    const std::string record = host_record(mine), beat = heartbeat_key(rank()), host = host_key(rank()),
                      joined = joined_key(rank());
    if (!call_within(
            [store_ptr, record, beat, host, joined] {
              store_ptr->add(beat, 1);
              store_ptr->set(host, std::vector<std::uint8_t>(record.begin(), record.end()));
              store_ptr->set(joined, std::vector<std::uint8_t>{1});
            },
            timeout))
      throw std::runtime_error("the store did not answer within dist.timeout_s = " + seconds(timeout));
    // Asked between checks for Ctrl-C or torchrun's SIGTERM, so neither waits out a rendezvous
    // of minutes; every store call bounded by dist.timeout_s (a link can go down meanwhile).
    const auto got = wait_for_keys(state_->store, keys, clock_type::now() + timeout, timeout, [] { throw_if_interrupted(); });
    if (got == key_wait::unreachable)
      throw std::runtime_error("the store did not answer within dist.timeout_s = " + seconds(timeout));
    if (got == key_wait::timed_out) {
      timed_out = true;
      throw std::runtime_error("the rendezvous timed out");
    }
    auto values = std::make_shared<std::vector<std::vector<std::uint8_t>>>();
    if (!call_within([store_ptr, host_keys, values] { *values = store_ptr->multiGet(host_keys); }, timeout))
      throw std::runtime_error("the store did not answer within dist.timeout_s = " + seconds(timeout));
    for (const auto& value : *values) hosts_.push_back(parse_host_record({value.begin(), value.end()}));
    return;
  } catch (const interrupted_error&) {
    throw;
  } catch (const std::exception& e) {
    std::vector<int> missing;
    bool answered = false;
    try {
      const auto store_ptr = state_->store;
      auto present = std::make_shared<std::vector<int>>();
      const int world_size = world();
      answered = timed_out && call_within(
                     [store_ptr, present, world_size] {
                       for (int r = 0; r < world_size; ++r)
                         if (!store_ptr->check({joined_key(r)})) present->push_back(r);
                     },
                     timeout);
      if (answered) missing = *present;
    } catch (const std::exception&) {
      answered = false;
    }
    if (!answered)
      throw run_error("dist", "rank " + std::to_string(rank()) + " (host " + mine.host +
                                  ") lost the rendezvous store at " + launch_.master_addr + ":" +
                                  std::to_string(launch_.master_port) + ": " + error_text(e));
    throw run_error("dist", "rank(s) " + rank_list(missing) + " of " + std::to_string(world()) +
                                " did not arrive at the rendezvous (" + launch_.master_addr + ":" +
                                std::to_string(launch_.master_port) + ") within dist.timeout_s = " + seconds(timeout) +
                                " (seen by rank " + std::to_string(rank()) + ", host " + mine.host + ")");
  }
}

namespace {

// Whether `work` finished within `slice`. Gloo's wait(timeout) throws when the time is up, and
// rethrows the collective's own error: only an unfinished work means "not yet". NCCL's
// wait(timeout) aborts the communicator when the time is up, so NCCL's work is polled.
bool finished_within(c10d::Work& work, std::chrono::milliseconds slice, bool gloo) {
  if (gloo) {
    try {
      work.wait(slice);
      return true;
    } catch (const std::exception&) {
      if (!work.isCompleted()) return false;
      work.wait();  // rethrows the collective's error
      return true;
    }
  }
  const auto end = clock_type::now() + slice;
  while (!work.isCompleted()) {
    if (clock_type::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  work.wait();  // NCCL: rethrows the collective's error; orders the current stream after it
  return true;
}

}  // namespace

void process_group::wait(c10d::Work& work, const std::string& what, bool on_host) {
  try {
    if (!on_host && !host_blocking()) {
      work.wait();  // NCCL's hot path: the stream waits, not the host
      return;
    }
    const auto slice = watch_ ? watch_->interval() : slice_without_watch;
    const auto deadline = clock_type::now() + timeout_;
    while (!finished_within(work, slice, host_blocking())) {
      check_between_slices(what);
      // Gloo ends its own work after dist.timeout_s; NCCL's is bounded here.
      if (!host_blocking() && clock_type::now() >= deadline)
        abandon(what, "it did not complete within dist.timeout_s = " + seconds(timeout_), false);
    }
  } catch (const run_error&) {
    throw;
  } catch (const interrupted_error&) {
    throw;
  } catch (const std::exception&) {
    fail(what);
  }
}

void process_group::check_between_slices(const std::string& what) {
  if (interrupt_requested()) {
    failed_ = true;  // the collective stays unfinished
    throw interrupted_error();
  }
  if (!watch_) return;
  if (auto lost = watch_->verdict()) abandon(what, *lost, true);
  const std::string peers = watch_->failed_peers();
  if (!peers.empty()) abandon(what, peers, false);
}

// `lost`: the heartbeat has lost a peer or the store, so the store is not asked who else is
// silent (over a link that is down, a store call may not return for minutes).
void process_group::abandon(const std::string& what, const std::string& why, bool lost) {
  failed_ = true;
  if (lost) store_lost_ = true;
  std::string silent;
  if (!lost) {
    post_failure(what + " was abandoned: " + why);
    silent = silent_ranks();
  }
  throw run_error("dist", who() + ": " + what + " was abandoned: " + why + silent);
}

void process_group::post_failure(const std::string& message) {
  if (posted_failure_ || store_lost_ || world() < 2) return;
  posted_failure_ = true;
  try {
    const auto store_ptr = state_->store;
    const std::string key = failed_key(rank());
    if (!call_within(
            [store_ptr, key, message] {
              store_ptr->set(key, bytes_of(message));
              store_ptr->add(failures_key(), 1);
            },
            timeout_))
      store_lost_ = true;
  } catch (const std::exception&) {
    store_lost_ = true;
  }
}

std::vector<rank_outcome> process_group::exchange_outcomes(const rank_outcome& mine, bool wait_for_others) {
  if (store_lost_) return {};
  const std::string what = "gathering every rank's measurements";
  try {
    if (mine.failed) post_failure(mine.error);
    const auto store_ptr = state_->store;
    const std::string key = outcome_key(rank()), value = encode_outcome(mine);
    if (!call_within([store_ptr, key, value] { store_ptr->set(key, bytes_of(value)); }, timeout_))
      throw std::runtime_error("no answer within " + seconds(timeout_));
  } catch (const std::exception& e) {
    store_lost_ = true;
    throw run_error("dist", who() + ": " + what + " failed: the rendezvous store did not take this rank's: " +
                                error_text(e));
  }
  if (!wait_for_others) return {};
  const auto deadline = clock_type::now() + timeout_;
  const auto between = [&] {
    throw_if_interrupted();  // a peer that cannot stop in time must not keep this one's report
    if (watch_)
      if (auto lost = watch_->verdict()) {
        store_lost_ = true;
        throw run_error("dist", who() + ": " + what + " was abandoned: " + *lost);
      }
  };
  const auto unanswered = [&] {
    store_lost_ = true;
    return run_error("dist", who() + ": " + what + " failed: the rendezvous store did not answer within " +
                                 seconds(timeout_));
  };
  for (int r = 0; r < world(); ++r) {
    if (r == rank()) continue;
    key_wait got = key_wait::unreachable;
    try {
      got = wait_for_keys(state_->store, {outcome_key(r)}, deadline, timeout_, between);
    } catch (const run_error&) {
      throw;
    } catch (const interrupted_error&) {
      throw;
    } catch (const std::exception& e) {
      store_lost_ = true;
      throw run_error("dist", who() + ": " + what + " failed: " + error_text(e));
    }
    if (got == key_wait::unreachable) throw unanswered();
    if (got == key_wait::timed_out)
      throw run_error("dist", who() + ": " + what + " failed: " + rank_at(r, hosts_) +
                                  " did not hand in its measurements within dist.timeout_s = " + seconds(timeout_));
  }
  std::vector<std::string> keys;
  for (int r = 0; r < world(); ++r) keys.push_back(outcome_key(r));
  std::vector<rank_outcome> out;
  try {
    const auto store_ptr = state_->store;
    auto values = std::make_shared<std::vector<std::vector<std::uint8_t>>>();
    if (!call_within([store_ptr, keys, values] { *values = store_ptr->multiGet(keys); }, timeout_))
      throw unanswered();
    for (const auto& value : *values) out.push_back(decode_outcome(value));
  } catch (const run_error&) {
    throw;
  } catch (const std::exception& e) {
    store_lost_ = true;
    throw run_error("dist", who() + ": " + what + " failed: " + error_text(e));
  }
  return out;
}

void process_group::broadcast_from_rank0(std::vector<at::Tensor>& tensors) {
  c10d::BroadcastOptions o;
  o.rootRank = 0;
  // One collective per tensor keeps Gloo's and NCCL's requirements (same shape, one device) simple.
  check_open("broadcasting the initial parameters from rank 0");
  for (auto& t : tensors) {
    std::vector<at::Tensor> one{t};
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = state_->backend->broadcast(one, o);
    } catch (const std::exception&) {
      fail("broadcasting the initial parameters from rank 0");
    }
    wait(*work, "broadcasting the initial parameters from rank 0");
  }
}

void process_group::barrier() {
  check_open("the barrier that aligns the measured windows");
  c10d::BarrierOptions o;
  if (device_.is_cuda()) o.device = device_;
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = state_->backend->barrier(o);
  } catch (const std::exception&) {
    fail("the barrier that aligns the measured windows");
  }
  wait(*work, "the barrier that aligns the measured windows", true);
}

std::vector<std::vector<double>> process_group::all_gather(const std::vector<double>& mine) {
  check_open("gathering values from every rank");
  const auto n = static_cast<std::int64_t>(mine.size());
  auto opts = at::TensorOptions().dtype(at::kDouble).device(device_);
  at::Tensor input = at::tensor(mine, at::TensorOptions().dtype(at::kDouble)).to(device_);
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < world(); ++r) outputs[0].push_back(at::empty({n}, opts));
  std::vector<at::Tensor> inputs{input};
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = state_->backend->allgather(outputs, inputs);
  } catch (const std::exception&) {
    fail("gathering values from every rank");
  }
  wait(*work, "gathering values from every rank", true);
  std::vector<std::vector<double>> out;
  for (auto& t : outputs[0]) {
    at::Tensor host = t.cpu().contiguous();
    out.emplace_back(host.data_ptr<double>(), host.data_ptr<double>() + n);
  }
  return out;
}

void process_group::fail(const std::string& what) {
  std::string reason;
  try {
    throw;
  } catch (const std::exception& e) {
    reason = error_text(e);
  }
  failed_ = true;
  // The heartbeat, when it has lost someone already, says who; else ask the store who is silent.
  const auto lost = watch_ ? watch_->verdict() : std::nullopt;
  if (lost) {
    store_lost_ = true;
    throw run_error("dist", who() + ": " + what + " failed: " + reason + "; " + *lost);
  }
  post_failure(what + " failed: " + reason);
  throw run_error("dist", who() + ": " + what + " failed: " + reason + silent_ranks());
}

// A collective fails on every surviving rank, so each posts a key in the store and looks for the
// others' keys: ranks whose key never appears stopped (or hang). A rank far from the failure in a
// ring learns of it later, through the heartbeat, and on a loaded machine may post after the
// window: one whose heartbeat rose twice in the window is alive, and not named. Without the store,
// rank 0 is gone.
std::string process_group::silent_ranks() {
  if (world() < 2) return "";
  const auto window = std::min(timeout_, std::chrono::milliseconds(5000));
  const auto deadline = std::chrono::steady_clock::now() + window;
  std::vector<std::int64_t> beats_at_start;
  for (int r = 0; r < world() && watch_; ++r) beats_at_start.push_back(watch_->beats(r));
  const auto alive = [&](int r) {
    return watch_ && watch_->beats(r) >= beats_at_start[static_cast<std::size_t>(r)] + 2;
  };
  std::string silent;
  if (store_lost_) return "";
  try {
    for (int r = 0; r < world(); ++r) {
      if (r == rank()) continue;
      const auto got = wait_for_keys(state_->store, {failed_key(r)}, deadline, window);
      if (got == key_wait::unreachable) throw std::runtime_error("the store did not answer");
      if (got == key_wait::timed_out && !alive(r)) silent += (silent.empty() ? "" : ", ") + rank_at(r, hosts_);
    }
  } catch (const std::exception&) {
    store_lost_ = true;
    return "; the rendezvous store, on the host of " + rank_at(0, hosts_) +
           ", is unreachable too: rank 0 or its host stopped, or this host's link is down";
  }
  if (silent.empty()) return "";
  return "; " + silent + " did not report the failure within " + seconds(window) + ": gone, stopped or hung";
}

}  // namespace trainbench
