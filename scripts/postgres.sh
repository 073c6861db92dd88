#!/usr/bin/env bash
# A private PostgreSQL server for the tests and benchmarks: loopback only,
# trust authentication, its data in a directory of its own.
#
#   bash scripts/postgres.sh start   # installs Debian's postgresql if missing; idempotent
#   bash scripts/postgres.sh stop    # stops it and deletes its data
#   bash scripts/postgres.sh url     # prints the connection string
#
# The port is $WORKERS_OUTBOX_PG_PORT (default 54329); the data lives in
# $WORKERS_OUTBOX_PG_DIR (default /tmp/workers-outbox-postgres).
set -euo pipefail

port="${WORKERS_OUTBOX_PG_PORT:-54329}"
dir="${WORKERS_OUTBOX_PG_DIR:-/tmp/workers-outbox-postgres}"
url="postgres://postgres@127.0.0.1:${port}/postgres"

bin_dir() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$found" ] || [ ! -x "$found/initdb" ]; then
    return 1
  fi
  echo "$found"
}

# Runs a server program as the `postgres` user when we are root (initdb
# refuses to run as root), as ourselves otherwise.
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

install() {
  if bin_dir >/dev/null; then
    return
  fi
  echo "PostgreSQL is not installed: installing Debian's postgresql package" >&2
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
}

start() {
  install
  local bin
  bin=$(bin_dir)
  if [ -f "$dir/data/postmaster.pid" ] && as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    echo "$url"
    return
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then
    chown postgres "$dir"
  fi
  as_owner "$bin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --no-locale >/dev/null
  # Default durability (fsync, synchronous commit): the benchmark measures it.
  if ! as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c shared_buffers=256MB" \
    start >/dev/null; then
    echo "PostgreSQL did not start on 127.0.0.1:$port (is the port taken? set WORKERS_OUTBOX_PG_PORT); its log:" >&2
    tail -n 20 "$dir/log" >&2 || true
    exit 1
  fi
  echo "$url"
}

stop() {
  local bin
  if bin=$(bin_dir) && [ -d "$dir/data" ]; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) echo "$url" ;;
  *)
    echo "usage: $0 start|stop|url" >&2
    exit 64
    ;;
esac
