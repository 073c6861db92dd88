#!/usr/bin/env bash
# Builds the Worker crate in $1 into $1/build with worker-build, using the
# installed wasm-bindgen and binaryen's wasm-opt (worker-build would
# otherwise download both).
set -euo pipefail
cd "$(dirname "$0")/.."
crate=${1:?usage: build-worker.sh <crate directory>}

export WASM_BINDGEN_BIN="${WASM_BINDGEN_BIN:-$(command -v wasm-bindgen)}"
export WASM_OPT_BIN="${WASM_OPT_BIN:-$PWD/node_modules/.bin/wasm-opt}"
worker-build --release "$crate"
