#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the history tests (Debian's postgresql package).
#   scripts/pg-test-cluster.sh start DIR   initdb + start in DIR (an empty folder under /tmp); prints
#                                          the connection URL for TRAINBENCH_TEST_POSTGRES_URL
#   scripts/pg-test-cluster.sh stop DIR    stop it and remove DIR (safe to call twice, or after a failed start)
# As root the server runs as the `postgres` user (PostgreSQL refuses to run as root). It listens
# only on a Unix socket in DIR, on a port no other cluster uses, with trust authentication: nothing
# outside this machine can reach it, and it needs no password.
set -euo pipefail
die() { echo "pg-test-cluster.sh: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: $0 start|stop DIR"
cmd=$1
dir=$2

bin_dir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$d" ] && echo "$d"
}

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

case "$cmd" in
  start)
    if [ -z "$(bin_dir)" ]; then
      [ "$(id -u)" -eq 0 ] || die "PostgreSQL is not installed and this is not root: apt-get install postgresql"
      echo "pg-test-cluster.sh: apt-get install postgresql" >&2
      apt-get update -qq >&2
      # Debian's package creates and starts a cluster of its own; the tests use theirs only.
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >&2
    fi
    bin=$(bin_dir) || die "no PostgreSQL server binaries under /usr/lib/postgresql"
    mkdir -p "$dir"
    [ -z "$(ls -A "$dir")" ] || die "$dir is not empty"
    [ "$(id -u)" -ne 0 ] || chown postgres: "$dir"
    port=$(free_port)
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; die "initdb failed"; }
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses='' -c fsync=off" start >/dev/null ||
      { cat "$dir/server.log" >&2; die "the server did not start"; }
    echo "postgresql://postgres@/postgres?host=$dir&port=$port"
    ;;
  stop)
    [ -d "$dir" ] || exit 0
    bin=$(bin_dir) || true
    if [ -n "${bin:-}" ] && [ -f "$dir/data/postmaster.pid" ]; then
      as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
  *) die "usage: $0 start|stop DIR" ;;
esac
