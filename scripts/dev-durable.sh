#!/usr/bin/env bash
# Runs the Durable Object example (examples/durable-webhooks) locally on
# http://127.0.0.1:8788: installs what is missing, builds it, and serves it
# with local SQLite-backed Durable Objects. Customers register endpoints
# (its own /hooks, with WEBHOOK_SECRET, for the demo).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false

example=examples/durable-webhooks
bash scripts/build-worker.sh "$example"

if [[ ! -f $example/.dev.vars ]]; then
  printf 'ADMIN_TOKEN=dev-admin-token\n' > "$example/.dev.vars"
  echo "==> wrote $example/.dev.vars (ADMIN_TOKEN=dev-admin-token)"
fi
# The demo receiver (/hooks) verifies with WEBHOOK_SECRET (added to an older .dev.vars too).
if ! grep -q '^WEBHOOK_SECRET=' "$example/.dev.vars"; then
  [[ -z $(tail -c 1 "$example/.dev.vars") ]] || echo >> "$example/.dev.vars"
  printf 'WEBHOOK_SECRET=whsec_%s\n' "$(head -c 24 /dev/urandom | base64 -w 0)" >> "$example/.dev.vars"
  echo "==> added a random WEBHOOK_SECRET to $example/.dev.vars"
fi
# Local endpoints (http://127.0.0.1:…) may be registered in development only.
if ! grep -q '^ENDPOINTS_ALLOW_LOCAL=' "$example/.dev.vars"; then
  [[ -z $(tail -c 1 "$example/.dev.vars") ]] || echo >> "$example/.dev.vars"
  echo 'ENDPOINTS_ALLOW_LOCAL=1' >> "$example/.dev.vars"
  echo "==> added ENDPOINTS_ALLOW_LOCAL=1 to $example/.dev.vars"
fi

# RECEIVER_STATUS=500 (or any status) makes the receiving route refuse every webhook, to watch
# retries and dead letters; the retry policy's variables shorten the wait.
vars=()
for name in RECEIVER_STATUS MAX_ATTEMPTS BACKOFF_BASE_MS BACKOFF_CAP_MS; do
  if [[ -n ${!name:-} ]]; then vars+=(--var "$name:${!name}"); fi
done

# The fleet's table in the local D1 (what /admin/console/ lists).
npx wrangler d1 migrations apply DB --local --config "$example/wrangler.toml"

npx wrangler dev --config "$example/wrangler.toml" --local --ip 127.0.0.1 --port 8788 "${vars[@]}"
