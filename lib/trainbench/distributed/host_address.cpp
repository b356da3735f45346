#include "trainbench/distributed/host_address.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <set>

#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {

std::string numeric(const sockaddr* a) {
  char buf[INET6_ADDRSTRLEN] = {};
  const void* raw = a->sa_family == AF_INET
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
  return inet_ntop(a->sa_family, raw, buf, sizeof buf) ? buf : "";
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// The first IPv4 or IPv6 address of the interface, as Gloo takes it; also lists what exists.
std::string interface_address(const std::string& name, std::set<std::string>& names) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    names.insert(i->ifa_name);
    if (found.empty() && name == i->ifa_name) found = numeric(i->ifa_addr);
  }
  freeifaddrs(list);
  return found;
}

// The first address the name resolves to that a socket can bind to here (so it is this host's).
std::string bindable_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0) return "";
  std::string found;
  for (const addrinfo* r = result; r && found.empty(); r = r->ai_next) {
    const int fd = socket(r->ai_family, r->ai_socktype, r->ai_protocol);
    if (fd < 0) continue;
    if (bind(fd, r->ai_addr, r->ai_addrlen) == 0) found = numeric(r->ai_addr);
    close(fd);
  }
  freeaddrinfo(result);
  return found;
}

std::string joined(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::string this_host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

bool is_loopback(const std::string& address) {
  for (const auto& a : split_commas(address)) {
    in_addr v4{};
    in6_addr v6{};
    if (inet_pton(AF_INET, a.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127) return true;
    if (inet_pton(AF_INET6, a.c_str(), &v6) == 1) {
      if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
      if (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127) return true;
    }
  }
  return false;
}

gloo_choice choose_gloo_devices(const env_lookup& env) {
  gloo_choice c;
  const std::string ifnames = env("GLOO_SOCKET_IFNAME").value_or("");
  if (!ifnames.empty()) {
    for (const auto& name : split_commas(ifnames)) {
      std::set<std::string> names;
      const std::string address = interface_address(name, names);
      if (address.empty())
        throw config_error(
            "environment", "GLOO_SOCKET_IFNAME",
            "'" + name + "' is not an interface of this host with an address (it has: " + joined(names) + ")");
      c.interfaces.push_back(name);
      c.addresses.push_back(address);
    }
    c.how = "interface " + ifnames;
    return c;
  }
  const std::string host = this_host_name();
  const std::string address = bindable_address(host);
  if (!address.empty()) {
    c.addresses.push_back(address);
    c.how = "host name " + host;
    return c;
  }
  c.addresses.push_back("127.0.0.1");
  c.how = "loopback: the host name '" + host + "' resolves to no address of this host";
  return c;
}

std::string rank_at(int rank, const std::vector<rank_host>& hosts) {
  std::string out = "rank " + std::to_string(rank);
  if (rank < 0 || rank >= static_cast<int>(hosts.size())) return out;
  const rank_host& h = hosts[static_cast<std::size_t>(rank)];
  return out + " (host " + h.host + (h.address.empty() ? "" : ", " + h.address) + ")";
}

std::string host_record(const rank_host& h) { return h.host + " " + h.address; }

rank_host parse_host_record(const std::string& text) {
  const std::size_t space = text.find(' ');
  if (space == std::string::npos) return {text, ""};
  return {text.substr(0, space), text.substr(space + 1)};
}

void check_gloo_addresses(const std::vector<rank_host>& hosts) {
  std::set<std::string> names;
  for (const auto& h : hosts) names.insert(h.host);
  if (names.size() < 2) return;
  const std::string fix = "; set GLOO_SOCKET_IFNAME on every host to the interface that reaches the others";
  std::map<std::string, std::size_t> first_at;
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    const rank_host& h = hosts[r];
    if (h.address.empty()) continue;
    if (is_loopback(h.address))
      throw config_error("environment", "GLOO_SOCKET_IFNAME",
                         rank_at(static_cast<int>(r), hosts) +
                             " would carry Gloo over loopback, but the job spans hosts " + joined(names) + fix);
    const auto [it, fresh] = first_at.emplace(h.address, r);
    if (!fresh && hosts[it->second].host != h.host)
      throw config_error("environment", "GLOO_SOCKET_IFNAME",
                         rank_at(static_cast<int>(it->second), hosts) + " and " + rank_at(static_cast<int>(r), hosts) +
                             " are on different hosts with the same Gloo address, so neither can reach the other" +
                             fix);
  }
}

}  // namespace trainbench
