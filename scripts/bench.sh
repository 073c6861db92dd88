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
  --bin outbox-bench-postgres-claim --bin outbox-bench-recovery
# Builds benchmark binary $2 (source benches/outbox-bench/src/bin/$3) from
# today's source against the library at commit $1: a worktree of that
# commit under target/ (kept between runs), built into target/baseline-$1.
build_at() {
  local commit=$1 bin=$2 file=$3 tree=target/baseline-src-$1
  if [ "$(git -C "$tree" rev-parse --short HEAD 2>/dev/null)" != "$commit" ]; then
    git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
    git worktree prune
    git worktree add --detach "$tree" "$commit" >/dev/null
  fi
  cp "benches/outbox-bench/src/bin/$file" "$tree/benches/outbox-bench/src/bin/"
  if ! grep -q "$bin" "$tree/benches/outbox-bench/Cargo.toml"; then
    printf '\n[[bin]]\nname = "%s"\npath = "src/bin/%s"\n' "$bin" "$file" \
      >> "$tree/benches/outbox-bench/Cargo.toml"
  fi
  cargo build --release --manifest-path "$tree/Cargo.toml" --target-dir "target/baseline-$commit" \
    -p outbox-bench --bin "$bin"
}
baseline_of() { node -e "import('./benches/$1').then((m) => console.log(m.BASELINE_COMMIT))"; }
# The Postgres claim as it was before the claim floor, and recovery as it
# was before suspect groups and held releases, each from the same source.
build_at "$(baseline_of postgres_claim.mjs)" outbox-bench-postgres-claim postgres_claim.rs
build_at "$(baseline_of recovery.mjs)" outbox-bench-recovery recovery.rs
cargo test --release --test simulation --no-run
WORKERS_OUTBOX_POSTGRES_URL=$(bash scripts/postgres.sh start)
export WORKERS_OUTBOX_POSTGRES_URL
node benches/run.mjs
