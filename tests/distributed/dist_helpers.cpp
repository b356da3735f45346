#include "distributed/dist_helpers.hpp"

#include <ATen/ATen.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "trainbench/model/resnet.hpp"
#include "trainbench/stages/weights.hpp"

namespace tbtest {

const std::string five_steps =
    " --set measure.warmup_batches=0 --set measure.measured_batches=5 --set measure.repeats=1"
    " --set train.optimizer.lr=0.05";

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string rank_env(int rank, int world, int port) {
  return "RANK=" + std::to_string(rank) + " WORLD_SIZE=" + std::to_string(world) +
         " LOCAL_RANK=" + std::to_string(rank) + " LOCAL_WORLD_SIZE=" + std::to_string(world) +
         " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " ";
}

cli_result two_ranks(const std::string& args0, const std::string& args1) {
  const int port = free_port();
  // Rank 1's output follows the exit codes, so a failing test shows why either rank failed.
  return run_shell("log1=$(mktemp); " + rank_env(1, 2, port) + "\"$TB\"" + args1 + " > $log1 2>&1 & " +
                   rank_env(0, 2, port) + "\"$TB\"" + args0 +
                   "; echo rc0=$?; wait $!; echo rc1=$?; echo '--- rank 1:'; cat $log1; rm -f $log1");
}

std::string python() {
  const char* env = std::getenv("TRAINBENCH_PYTHON");
  return env ? env : TRAINBENCH_TEST_PYTHON;
}

std::vector<at::Tensor> parameters_of(const std::filesystem::path& weights) {
  trainbench::resnet model = trainbench::make_resnet("resnet18", 10);
  trainbench::load_weights(*model, weights);
  return model->parameters();
}

double max_relative_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(1e-3, a[i].abs().max().item<double>());
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

bool identical(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!at::equal(a[i], b[i])) return false;
  return true;
}

}  // namespace tbtest
