// The example Worker's wasm stays within its size budget: Workers compile
// every byte at cold start, within the startup limit, so its growth is a
// decision, not a drift. 640 KiB since the console gained endpoints (544 KB
// then), leaving room for its audit log, tenant portal and fleet view.
import { it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { gzipSync } from "node:zlib";
import { root } from "./harness.mjs";

const BUDGET = 640 * 1024; // gzipped (level 9), as BENCHMARKS.md counts it

it("keeps the example Worker's wasm within 640 KiB gzipped", () => {
  const wasm = readFileSync(path.join(root, "examples/signup-mail/build/index_bg.wasm"));
  const gzipped = gzipSync(wasm, { level: 9 }).length;
  assert.ok(gzipped <= BUDGET, `${gzipped} bytes gzipped, over the budget of ${BUDGET}`);
});
