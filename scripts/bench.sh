#!/usr/bin/env bash
# Runs the benchmarks and rewrites BENCHMARKS.md and benches/chart.png.
# BENCH_MESSAGES (default 10000), BENCH_LARGEST (default 1000000) and
# BENCH_DRAINER_MESSAGES (default 100000) scale it; BENCH_PG_* those of the
# Postgres claim (benches/postgres_claim.mjs). Starts the private Postgres
# server of scripts/postgres.sh for the concurrent-drainer figures.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false
# BENCH_ONLY=postgres: the Postgres claim and the fault simulation alone.
if [ "${BENCH_ONLY:-}" != postgres ]; then
  bash scripts/build-worker.sh examples/signup-mail
  bash scripts/build-worker.sh benches/outbox-bench
  bash scripts/build-worker.sh tests/d1-worker
fi
cargo build --release -p outbox-bench --bin outbox-bench-native --bin outbox-bench-drainers \
  --bin outbox-bench-postgres-claim
# The Postgres claim as it was before the claim floor, built from the same
# benchmark source: a worktree of that commit under target/ (kept between runs).
baseline=$(node -e 'import("./benches/postgres_claim.mjs").then((m) => console.log(m.BASELINE_COMMIT))')
if [ "$(git -C target/baseline-src rev-parse --short HEAD 2>/dev/null)" != "$baseline" ]; then
  git worktree remove --force target/baseline-src 2>/dev/null || rm -rf target/baseline-src
  git worktree prune
  git worktree add --detach target/baseline-src "$baseline" >/dev/null
fi
cp benches/outbox-bench/src/bin/postgres_claim.rs target/baseline-src/benches/outbox-bench/src/bin/
if ! grep -q outbox-bench-postgres-claim target/baseline-src/benches/outbox-bench/Cargo.toml; then
  printf '\n[[bin]]\nname = "outbox-bench-postgres-claim"\npath = "src/bin/postgres_claim.rs"\n' \
    >> target/baseline-src/benches/outbox-bench/Cargo.toml
fi
cargo build --release --manifest-path target/baseline-src/Cargo.toml --target-dir target/baseline \
  -p outbox-bench --bin outbox-bench-postgres-claim
cargo test --release --test simulation --no-run
WORKERS_OUTBOX_POSTGRES_URL=$(bash scripts/postgres.sh start)
export WORKERS_OUTBOX_POSTGRES_URL
node benches/run.mjs
