// The example Worker's wasm stays within its size budget: Workers load every
// byte at cold start, and the free plan caps a Worker at 3 MB compressed.
import { it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { gzipSync } from "node:zlib";
import { root } from "./harness.mjs";

const BUDGET = 0.5 * 1024 * 1024; // 0.5 MB gzipped, as BENCHMARKS.md counts it

it("keeps the example Worker's wasm within 0.5 MB gzipped", () => {
  const wasm = readFileSync(path.join(root, "examples/signup-mail/build/index_bg.wasm"));
  const gzipped = gzipSync(wasm, { level: 9 }).length;
  assert.ok(gzipped <= BUDGET, `${gzipped} bytes gzipped, over the budget of ${BUDGET}`);
});
