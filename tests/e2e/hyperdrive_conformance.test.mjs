// The adapter conformance suite on Postgres through a Hyperdrive binding,
// inside workerd: Miniflare points the binding at the test server that
// `scripts/postgres.sh start` runs (or WORKERS_OUTBOX_POSTGRES_URL), in a
// database of its own, created here and dropped at the end.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { start } from "./harness.mjs";

const server = process.env.WORKERS_OUTBOX_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:54329/postgres";
const database = `hyperdrive_${process.pid}`;

function psql(sql) {
  try {
    return execFileSync("psql", [server, "-v", "ON_ERROR_STOP=1", "-q", "-tA", "-c", sql], { stdio: "pipe" })
      .toString()
      .trim();
  } catch (error) {
    throw new Error(
      `cannot reach Postgres at ${server} (${String(error.stderr ?? error.message).trim()}): ` +
        "start it with `bash scripts/postgres.sh start`, or set WORKERS_OUTBOX_POSTGRES_URL",
    );
  }
}

psql(`DROP DATABASE IF EXISTS "${database}"`);
psql(`CREATE DATABASE "${database}"`);
const url = new URL(server);
url.pathname = `/${database}`;
// Miniflare insists on a password; the test server trusts loopback and ignores it.
if (!url.password) url.password = "trust";
const mf = await start("tests/d1-worker", { migrate: false, hyperdrives: { HYPERDRIVE: url.toString() } });
const names = await (await mf.dispatchFetch("http://worker/cases")).json();

describe("Postgres conformance through Hyperdrive", () => {
  after(async () => {
    await mf.dispose();
    // The harness keeps the proxy's socket errors from failing the run, so
    // connections left open are ended by force.
    psql(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
  });
  for (const name of names) {
    it(name, async () => {
      const response = await mf.dispatchFetch(`http://worker/pg-cases/${name}`, { method: "POST" });
      const text = await response.text();
      let result;
      try {
        result = JSON.parse(text);
      } catch {
        assert.fail(`HTTP ${response.status}: ${text}`);
      }
      assert.equal(result.failure, undefined, result.failure);
      assert.equal(response.status, 200);
    });
  }
});
