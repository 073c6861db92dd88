#!/usr/bin/env bash
# Runs the example Worker locally: installs what is missing, builds it,
# applies migrations/ to local D1, starts a stand-in mail API and webhook receiver
# (scripts/mail-sink.mjs: it prints what it gets; the mail itself goes through local
# send_email unless MAIL_API_URL is set),
# and serves the Worker on http://127.0.0.1:8787 with cron testing enabled
# (GET /__scheduled fires the drain).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false

bash scripts/build-worker.sh examples/signup-mail

if [[ ! -f .dev.vars ]]; then
  echo 'ADMIN_TOKEN=dev-admin-token' > .dev.vars
  echo "==> wrote .dev.vars (ADMIN_TOKEN=dev-admin-token)"
fi
# The console's tenant portal signs its links with PORTAL_KEY.
if ! grep -q '^PORTAL_KEY=' .dev.vars; then
  [[ -z $(tail -c 1 .dev.vars) ]] || echo >> .dev.vars
  echo "PORTAL_KEY=$(node -e 'process.stdout.write(require("crypto").randomBytes(32).toString("hex"))')" >> .dev.vars
  echo "==> added a random PORTAL_KEY to .dev.vars (the console's tenant portal)"
fi
# Local endpoints (the mail sink's /hooks) may be registered in development only.
if ! grep -q '^OUTBOX_SEALING_KEYS=' .dev.vars; then
  # Payloads sealed at rest in local D1 (docs/security.md): a random key of this machine's own.
  [[ -z $(tail -c 1 .dev.vars) ]] || echo >> .dev.vars
  key() { node -e 'process.stdout.write(require("crypto").randomBytes(32).toString("base64"))'; }
  echo "OUTBOX_SEALING_KEYS=dev-1:$(key)" >> .dev.vars
  echo "OUTBOX_HASH_KEY=$(key)" >> .dev.vars
  echo "==> added random OUTBOX_SEALING_KEYS and OUTBOX_HASH_KEY to .dev.vars (payloads sealed at rest)"
fi
if ! grep -q '^ENDPOINTS_ALLOW_LOCAL=' .dev.vars; then
  [[ -z $(tail -c 1 .dev.vars) ]] || echo >> .dev.vars
  echo 'ENDPOINTS_ALLOW_LOCAL=1' >> .dev.vars
  echo "==> added ENDPOINTS_ALLOW_LOCAL=1 to .dev.vars"
fi

npx wrangler d1 migrations apply DB --local

node scripts/mail-sink.mjs &
sink=$!
trap 'kill $sink 2>/dev/null || true' EXIT

npx wrangler dev --local --ip 127.0.0.1 --port "${PORT:-8787}" --test-scheduled
