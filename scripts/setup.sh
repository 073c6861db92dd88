#!/usr/bin/env bash
# Installs what building and testing need, skipping whatever is already at
# the right version: the wasm32 target, worker-build, wasm-bindgen-cli (its
# version must equal the wasm-bindgen in Cargo.lock), Chromium and the npm
# packages.
set -euo pipefail
cd "$(dirname "$0")/.."

WORKER_BUILD_VERSION=0.8.7
WASM_BINDGEN_VERSION=$(sed -n '/^name = "wasm-bindgen"$/{n;s/^version = "\(.*\)"$/\1/p;}' Cargo.lock)

say() { printf '==> %s\n' "$*"; }

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  say "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

if [[ "$(worker-build --version 2>/dev/null || true)" != *"$WORKER_BUILD_VERSION"* ]]; then
  say "installing worker-build $WORKER_BUILD_VERSION"
  cargo install worker-build --version "$WORKER_BUILD_VERSION" --locked
fi

# Without --locked: the CLI's lockfile names a crate version the registry lacks.
if [[ "$(wasm-bindgen --version 2>/dev/null || true)" != *"$WASM_BINDGEN_VERSION"* ]]; then
  say "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION"
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi

# The console's browser tests drive Debian's Chromium through playwright-core
# (which downloads no browser).
if ! command -v chromium >/dev/null; then
  say "installing Debian's chromium for the browser tests"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ||
  package.json -nt node_modules/.package-lock.json ]]; then
  say "installing npm packages"
  npm ci --no-audit --no-fund
fi
