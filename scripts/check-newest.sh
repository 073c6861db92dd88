#!/usr/bin/env bash
# Builds the library as it would be published (`cargo package`), against the
# newest releases its requirements accept (a fresh lockfile), natively and
# for Workers: a user on a newer `worker` 0.8.x or `wasm-bindgen` 0.2.x must
# be able to add it. The example and tests keep the repository's lockfile.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
cargo package -p workers-outbox --allow-dirty --no-verify --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar xzf "target/package/workers-outbox-$version.crate" -C "$work"
cd "$work/workers-outbox-$version"
CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=allow cargo generate-lockfile --quiet
awk -F'"' '/^name = /{name=$2} /^version = /{
  if (name ~ /^(worker|wasm-bindgen|sea-query|rusqlite|tokio)$/) print "  newest: " name " " $2 }' Cargo.lock
export CARGO_TARGET_DIR="$OLDPWD/target/newest"
cargo check --quiet --features native-http
cargo check --quiet --target wasm32-unknown-unknown --no-default-features --features workers
