// Where a rank runs and which address its Gloo traffic uses: plain name and interface lookups.
#include <catch2/catch.hpp>
#include <map>

#include "trainbench/distributed/host_address.hpp"
#include "trainbench/util/error.hpp"

using namespace trainbench;

namespace {
env_lookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}
}  // namespace

TEST_CASE("host records: loopback addresses, the record's round trip, and how a rank is named") {
  CHECK(is_loopback("127.0.0.1"));
  CHECK(is_loopback("127.1.2.3"));
  CHECK(is_loopback("::1"));
  CHECK(is_loopback("::ffff:127.0.0.1"));
  CHECK(is_loopback("10.0.0.1,127.0.0.1"));  // one device of several
  CHECK_FALSE(is_loopback("10.213.0.1"));
  CHECK_FALSE(is_loopback("fe80::1"));
  const rank_host h = parse_host_record(host_record({"node7", "10.0.0.7"}));
  CHECK(h.host == "node7");
  CHECK(h.address == "10.0.0.7");
  CHECK(parse_host_record(host_record({"node7", ""})).address.empty());
  CHECK(rank_at(1, {{"a", "10.0.0.1"}, {"b", "10.0.0.2"}}) == "rank 1 (host b, 10.0.0.2)");
  CHECK(rank_at(1, {{"a", "10.0.0.1"}, {"b", ""}}) == "rank 1 (host b)");
  CHECK(rank_at(1, {}) == "rank 1");
}

TEST_CASE("a job across hosts refuses Gloo over loopback or one address on two hosts, naming the rank") {
  auto refusal = [](const std::vector<rank_host>& hosts) {
    try {
      check_gloo_addresses(hosts);
    } catch (const config_error& e) {
      CHECK(e.key() == "GLOO_SOCKET_IFNAME");
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // One host: loopback is what it should use.
  CHECK(refusal({{"a", "127.0.0.1"}, {"a", "127.0.0.1"}}) == "accepted");
  CHECK(refusal({{"a", "10.0.0.1"}, {"b", "10.0.0.2"}}) == "accepted");
  CHECK(refusal({{"a", "10.0.0.1"}, {"a", "10.0.0.1"}, {"b", "10.0.0.2"}}) == "accepted");
  CHECK_THAT(refusal({{"a", "10.0.0.1"}, {"b", "127.0.0.1"}}),
             Catch::Contains("rank 1 (host b, 127.0.0.1) would carry Gloo over loopback"));
  CHECK_THAT(refusal({{"a", "172.17.0.1"}, {"b", "172.17.0.1"}}),
             Catch::Contains("rank 0 (host a, 172.17.0.1) and rank 1 (host b, 172.17.0.1)"));
  CHECK(refusal({{"a", ""}, {"b", ""}}) == "accepted");  // NCCL: no Gloo address
}

TEST_CASE("Gloo's device: GLOO_SOCKET_IFNAME's interface and its address, or a clear error") {
  const gloo_choice lo = choose_gloo_devices(env_of({{"GLOO_SOCKET_IFNAME", "lo"}}));
  CHECK(lo.interfaces == std::vector<std::string>{"lo"});
  REQUIRE(lo.addresses.size() == 1);
  CHECK(is_loopback(lo.addresses[0]));
  try {
    choose_gloo_devices(env_of({{"GLOO_SOCKET_IFNAME", "lo,no-such-if0"}}));
    FAIL("an interface that does not exist was accepted");
  } catch (const config_error& e) {
    CHECK(e.key() == "GLOO_SOCKET_IFNAME");
    CHECK_THAT(e.what(), Catch::Contains("'no-such-if0' is not an interface of this host") && Catch::Contains("lo"));
  }
  // Without it: an address of this host (the host name's, else loopback), never empty.
  const gloo_choice by_name = choose_gloo_devices(env_of({}));
  CHECK(by_name.interfaces.empty());
  REQUIRE(by_name.addresses.size() == 1);
  CHECK_FALSE(by_name.addresses[0].empty());
}
