// The adapter conformance suite, on D1 inside workerd: the very cases the
// SQLite adapter runs under `cargo test`.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { start } from "./harness.mjs";

const mf = await start("tests/d1-worker", { migrate: false });
const names = await (await mf.dispatchFetch("http://worker/cases")).json();

describe("D1 conformance", () => {
  after(() => mf.dispose());
  for (const name of names) {
    it(name, async () => {
      const response = await mf.dispatchFetch(`http://worker/cases/${name}`, { method: "POST" });
      const result = await response.json();
      assert.equal(result.failure, undefined, result.failure);
      assert.equal(response.status, 200);
    });
  }
});
