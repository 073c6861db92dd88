#!/usr/bin/env bash
# Runs the Durable Object example (examples/durable-webhooks) locally on
# http://127.0.0.1:8788: installs what is missing, builds it, and serves it
# with local SQLite-backed Durable Objects. Webhooks go to its own /hooks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false

example=examples/durable-webhooks
bash scripts/build-worker.sh "$example"

if [[ ! -f $example/.dev.vars ]]; then
  printf 'ADMIN_TOKEN=dev-admin-token\nWEBHOOK_URL=http://127.0.0.1:8788/hooks\n' > "$example/.dev.vars"
  echo "==> wrote $example/.dev.vars (ADMIN_TOKEN=dev-admin-token, WEBHOOK_URL: this Worker's /hooks)"
fi

npx wrangler dev --config "$example/wrangler.toml" --local --ip 127.0.0.1 --port 8788
