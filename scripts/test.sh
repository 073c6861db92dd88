#!/usr/bin/env bash
# Every check and every test: formatting, lints (native and wasm32), the
# native tests with the SQLite and Postgres conformance suites (Postgres is
# installed if missing and started on a loopback port), the wasm tests under Node,
# and the Miniflare suite (D1 and Durable Object conformance, alarms, and both
# example Workers end to end).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

say() { printf '\n==> %s\n' "$*"; }

say "cargo fmt --check"
cargo fmt --all --check

say "clippy (native)"
cargo clippy --all-targets -- -D warnings
cargo clippy -p outbox-bench --all-targets -- -D warnings
cargo clippy -p quickstart-postgres -- -D warnings
cargo clippy -p console-postgres -- -D warnings

say "rustdoc (no broken links)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --features conformance,postgres,native-http,metrics,tracing,console,tower

say "the core builds for wasm32 with its default features"
cargo check --target wasm32-unknown-unknown -p workers-outbox

say "and natively with the workers feature on (its Workers parts are wasm32-only)"
cargo check -p workers-outbox --features workers

say "the library as published, against the newest compatible releases"
bash scripts/check-newest.sh

say "clippy (wasm32)"
cargo clippy --workspace --exclude quickstart-postgres --exclude console-postgres --target wasm32-unknown-unknown \
  --no-default-features --features workers,conformance,console -- -D warnings

say "a private Postgres server for the Postgres tests (scripts/postgres.sh)"
WORKERS_OUTBOX_POSTGRES_URL=$(bash scripts/postgres.sh start)
export WORKERS_OUTBOX_POSTGRES_URL

say "native tests (SQLite and Postgres)"
cargo test

say "the Postgres guide's native quickstart, run against the stand-in mail API"
MAIL_SINK_PORT=18025 node scripts/mail-sink.mjs >/tmp/workers-outbox-mail-sink.log 2>&1 &
sink=$!
trap 'kill $sink 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q listening /tmp/workers-outbox-mail-sink.log && break; sleep 0.1; done
quickstart=$(DATABASE_URL=$WORKERS_OUTBOX_POSTGRES_URL MAIL_API_URL=http://127.0.0.1:18025/send \
  cargo run -q -p quickstart-postgres)
echo "$quickstart"
kill $sink 2>/dev/null || true
grep -Eq ', [1-9][0-9]* delivered' <<<"$quickstart" \
  || { echo "the quickstart delivered nothing over HTTP (mail sink log: /tmp/workers-outbox-mail-sink.log)"; exit 1; }

say "the native console example (axum over Postgres), over HTTP"
cargo build -q -p console-postgres
CONSOLE_TOKEN=ci-console-token CONSOLE_ADDR=127.0.0.1:18790 DATABASE_URL=$WORKERS_OUTBOX_POSTGRES_URL \
  target/debug/console-postgres >/tmp/workers-outbox-console.log 2>&1 &
native_console=$!
trap 'kill $native_console 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -qs "console on" /tmp/workers-outbox-console.log && break; sleep 0.1; done
node scripts/console-native-check.mjs http://127.0.0.1:18790/console ci-console-token \
  || { echo "the native console failed its check (log: /tmp/workers-outbox-console.log)"; exit 1; }
kill $native_console 2>/dev/null || true

say "wasm tests (Node)"
cargo test --target wasm32-unknown-unknown --no-default-features --features workers --lib

say "build the Workers"
bash scripts/build-worker.sh examples/signup-mail
bash scripts/build-worker.sh examples/durable-webhooks
bash scripts/build-worker.sh tests/d1-worker

say "Miniflare tests"
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false
# A test that hangs fails after 10 minutes, and a failed test's open handles
# (a Miniflare, a browser) cannot keep the run from ending.
node --test --test-reporter=spec --test-timeout=600000 --test-force-exit tests/e2e/
