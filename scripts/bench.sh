#!/usr/bin/env bash
# Runs the benchmarks and rewrites BENCHMARKS.md and benches/chart.png.
# BENCH_MESSAGES (default 10000) and BENCH_LARGEST (default 1000000) scale it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false
bash scripts/build-worker.sh examples/signup-mail
bash scripts/build-worker.sh benches/outbox-bench
bash scripts/build-worker.sh tests/d1-worker
cargo build --release -p outbox-bench --bin outbox-bench-native
node benches/run.mjs
