#!/usr/bin/env bash
# A cluster of "hosts" on this machine: N Linux network namespaces joined by a bridge through
# veth pairs, each with its own address, loopback, host name and /etc/hosts. To everything above
# the kernel (c10d's TCPStore, Gloo, torchrun) each is a machine of its own whose link can go down.
#   usage: scripts/netns-cluster.sh [--prefix P] [--nodes N] [--subnet A.B.C] COMMAND
#     up                    make the cluster (again: nothing to do when it is up already)
#     down                  end every process on its nodes, remove everything `up` made
#     exec NODE CMD...      run CMD on NODE (0, 1, ... or its name), as NODE's host name
#     with CMD...           up, run CMD on this machine (NETNS_CLUSTER_PREFIX set), down however CMD ends
#     addr NODE             print NODE's address
#     link NODE down|up     pull NODE's cable (its bridge port) or plug it back
#     pids NODE             print the processes running on NODE, one a line
#     status                print the nodes, their addresses and links
# Nodes are P-node0 ... (namespaces and host names alike), with addresses A.B.C.1 ... on a /24
# that only this cluster's bridge P-br carries: the bridge has no address of its own and no
# uplink, and the nodes have no default route, so their traffic stays among them. Defaults:
# --prefix tb (or $NETNS_CLUSTER_PREFIX), --nodes 2, --subnet 10.213.0. Needs root.
# What `up` made is listed in /run/netns-cluster/P; `down` removes exactly that, and `up`
# refuses to start when a name it would use belongs to something it did not make.
set -euo pipefail
prefix=${NETNS_CLUSTER_PREFIX:-tb}
nodes=2
subnet=10.213.0
usage() {
  sed -n '4,12p' "$0" >&2
  exit 2
}
fail() {
  echo "netns-cluster.sh: $*" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=${2:-}; shift 2 ;;
    --nodes) nodes=${2:-}; shift 2 ;;
    --subnet) subnet=${2:-}; shift 2 ;;
    -h|--help) usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
command=$1
shift
# Link names hold 15 characters: "<prefix>-br" and "<prefix>-v<99>".
[[ "$prefix" =~ ^[a-z][a-z0-9]{0,9}$ ]] || fail "--prefix '$prefix': expected a lower-case letter, then up to 9 letters or digits"
[[ "$nodes" =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 99 ] || fail "--nodes '$nodes': expected 1 to 99"
[[ "$subnet" =~ ^(10|172|192)\.([0-9]{1,3})\.([0-9]{1,3})$ ]] && [ "${BASH_REMATCH[2]}" -le 255 ] &&
  [ "${BASH_REMATCH[3]}" -le 255 ] || fail "--subnet '$subnet': expected the first three numbers of a private /24, like 10.213.0"
[ "$(id -u)" -eq 0 ] || fail "needs root (network namespaces, links, /etc/netns)"

state=/run/netns-cluster/$prefix
bridge=$prefix-br
node_name() { echo "$prefix-node$1"; }
veth_name() { echo "$prefix-v$1"; }
netns_exists() { [ -e "/run/netns/$1" ]; }
link_exists() { ip link show dev "$1" > /dev/null 2>&1; }

# NODE as given (an index or a name) -> its index, from the state of a cluster that is up.
node_index() {
  [ -f "$state/nodes" ] || fail "cluster '$prefix' is not up"
  local n
  n=$(cat "$state/nodes")
  local i=${1#"$prefix-node"}
  [[ "$i" =~ ^[0-9]+$ ]] && [ "$i" -lt "$n" ] || fail "node '$1': cluster '$prefix' has nodes 0 to $((n - 1)) ($prefix-node0 ...)"
  echo "$i"
}

recorded() { [ -f "$state/made" ] && grep -qxF "$1" "$state/made"; }
record() { echo "$1" >> "$state/made"; }

# Every name `up` will use is free, or was made by this fixture.
check_names() {
  local i
  if link_exists "$bridge" && ! recorded "link $bridge"; then fail "link $bridge exists and was not made by this fixture; choose another --prefix"; fi
  for ((i = 0; i < nodes; i++)); do
    local ns veth
    ns=$(node_name "$i")
    veth=$(veth_name "$i")
    if netns_exists "$ns" && ! recorded "netns $ns"; then fail "network namespace $ns exists and was not made by this fixture; choose another --prefix"; fi
    if link_exists "$veth" && ! recorded "link $veth"; then fail "link $veth exists and was not made by this fixture; choose another --prefix"; fi
    if [ -e "/etc/netns/$ns" ] && ! recorded "etc /etc/netns/$ns"; then fail "/etc/netns/$ns exists and was not made by this fixture; choose another --prefix"; fi
  done
}

# Ends what runs on a node (SIGKILL ends stopped processes too) and waits until nothing does:
# a namespace deleted while a process still runs in it outlives its name.
kill_node() {
  local ns=$1 pids waited=0
  while pids=$(ip netns pids "$ns" 2> /dev/null) && [ -n "$pids" ]; do
    # shellcheck disable=SC2086
    kill -KILL $pids 2> /dev/null || true
    [ $waited -lt 200 ] || { echo "netns-cluster.sh: processes on $ns do not end: ${pids//$'\n'/ }" >&2; return 1; }
    waited=$((waited + 1))
    sleep 0.05  # the kernel ends them asynchronously; polled, at most 10 s
  done
}

# Removes what `up` recorded, newest first; never anything else. Safe to run twice.
down() {
  [ -d "$state" ] || return 0
  local kind name
  if [ -f "$state/made" ]; then
    while read -r kind name; do
      if [ "$kind" = netns ] && netns_exists "$name"; then kill_node "$name" || return 1; fi
    done < "$state/made"
    while read -r kind name; do
      case "$kind" in
        netns) if netns_exists "$name"; then ip netns del "$name"; fi ;;
        link) if link_exists "$name"; then ip link del "$name"; fi ;;
        etc) rm -f "$name/hosts"; rmdir "$name" 2> /dev/null || true ;;
      esac
    done < <(tac "$state/made")
  fi
  rm -rf "$state"
}

hosts_file() {
  local i
  echo "127.0.0.1 localhost"
  for ((i = 0; i < nodes; i++)); do echo "$subnet.$((i + 1)) $(node_name "$i")"; done
}

up() {
  if [ -f "$state/complete" ]; then
    [ "$(cat "$state/nodes")" = "$nodes" ] && [ "$(cat "$state/subnet")" = "$subnet" ] ||
      fail "cluster '$prefix' is up with $(cat "$state/nodes") nodes on $(cat "$state/subnet").0/24; run down first"
    local i ok=1
    for ((i = 0; i < nodes; i++)); do netns_exists "$(node_name "$i")" || ok=0; done
    link_exists "$bridge" || ok=0
    [ $ok -eq 0 ] || return 0
  fi
  check_names
  down  # what an interrupted `up` left
  mkdir -p "$state"
  echo "$nodes" > "$state/nodes"
  echo "$subnet" > "$state/subnet"
  : > "$state/made"
  # Any failure (set -e) or signal from here on removes what was made so far.
  trap '[ -f "$state/complete" ] || down' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  ip link add "$bridge" type bridge
  record "link $bridge"
  ip link set "$bridge" up
  local i
  for ((i = 0; i < nodes; i++)); do
    local ns veth
    ns=$(node_name "$i")
    veth=$(veth_name "$i")
    ip netns add "$ns"
    record "netns $ns"
    # The pair's inner end is eth0 in the namespace; deleting the namespace deletes both ends.
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    # Deleted by name on the way down: a deleted namespace takes its end of the pair only later,
    # which would block the name for the next `up`.
    record "link $veth"
    ip link set "$veth" master "$bridge"
    ip link set "$veth" up
    ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    # `ip netns exec` mounts these over /etc/hosts: every node's name resolves to its address.
    mkdir -p "/etc/netns/$ns"
    record "etc /etc/netns/$ns"
    hosts_file > "/etc/netns/$ns/hosts"
  done
  touch "$state/complete"
  trap - EXIT INT TERM
}

on_node() {
  local i ns
  i=$(node_index "$1")
  shift
  ns=$(node_name "$i")
  [ $# -ge 1 ] || fail "exec $ns: no command"
  # A UTS namespace of its own gives the node its host name, which resolves to its address.
  exec ip netns exec "$ns" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
}

status() {
  [ -f "$state/complete" ] || { echo "cluster '$prefix': down"; return 0; }
  local i n
  n=$(cat "$state/nodes")
  for ((i = 0; i < n; i++)); do
    local ns
    ns=$(node_name "$i")
    printf '%s %s link %s, %s process(es)\n' "$ns" "$(cat "$state/subnet").$((i + 1))" \
      "$(cat "/sys/class/net/$(veth_name "$i")/operstate" 2> /dev/null || echo missing)" \
      "$(ip netns pids "$ns" 2> /dev/null | wc -l)"
  done
}

case "$command" in
  up) up ;;
  down) down ;;
  exec) [ $# -ge 1 ] || usage; on_node "$@" ;;
  with)
    [ $# -ge 1 ] || usage
    up
    trap down EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    rc=0
    NETNS_CLUSTER_PREFIX=$prefix "$@" || rc=$?
    exit $rc
    ;;
  addr) [ $# -eq 1 ] || usage; echo "$(cat "$state/subnet").$(($(node_index "$1") + 1))" ;;
  link)
    [ $# -eq 2 ] && [[ "$2" =~ ^(up|down)$ ]] || usage
    ip link set "$(veth_name "$(node_index "$1")")" "$2"
    ;;
  pids) [ $# -eq 1 ] || usage; ip netns pids "$(node_name "$(node_index "$1")")" ;;
  status) status ;;
  *) usage ;;
esac
