#!/usr/bin/env bash
# Runs the benchmarks and rewrites BENCHMARKS.md and benches/chart.png.
# BENCH_MESSAGES (default 10000), BENCH_LARGEST (default 1000000) and
# BENCH_DRAINER_MESSAGES (default 100000) scale it. Starts the private
# Postgres server of scripts/postgres.sh for the concurrent-drainer figures.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false
bash scripts/build-worker.sh examples/signup-mail
bash scripts/build-worker.sh benches/outbox-bench
bash scripts/build-worker.sh tests/d1-worker
cargo build --release -p outbox-bench --bin outbox-bench-native --bin outbox-bench-drainers
cargo test --release --test simulation --no-run
WORKERS_OUTBOX_POSTGRES_URL=$(bash scripts/postgres.sh start)
export WORKERS_OUTBOX_POSTGRES_URL
node benches/run.mjs
