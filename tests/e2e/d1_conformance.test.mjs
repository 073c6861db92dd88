// The adapter conformance suite, on D1 inside workerd: the very cases the
// SQLite adapter runs under `cargo test`.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { start } from "./harness.mjs";

const mf = await start("tests/d1-worker", { migrate: false });
const names = await (await mf.dispatchFetch("http://worker/cases")).json();

after(() => mf.dispose());

describe("D1 conformance", () => {
  for (const name of names) {
    it(name, async () => {
      const response = await mf.dispatchFetch(`http://worker/cases/${name}`, { method: "POST" });
      const result = await response.json();
      assert.equal(result.failure, undefined, result.failure);
      assert.equal(response.status, 200);
    });
  }
});

// The same cases through a D1 Sessions API handle (`D1Database::replica_reads`),
// the handle a console reads through: locally D1 has no replicas, so this checks
// the session object is driven as the binding is.
// (A Miniflare of its own: a fresh database, since cases name their tables.)
const sessions = await start("tests/d1-worker", { migrate: false });
after(() => sessions.dispose());

describe("D1 conformance through a Sessions API handle", () => {
  for (const name of names) {
    it(name, async () => {
      const response = await sessions.dispatchFetch(`http://worker/session-cases/${name}`, { method: "POST" });
      const result = await response.json();
      assert.equal(result.failure, undefined, result.failure);
      assert.equal(response.status, 200);
    });
  }
});
