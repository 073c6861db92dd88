// A drain's Analytics Engine data points, written by the wasm build through
// the binding's `writeDataPoint` (recorded by the test Worker: Miniflare's own
// binding discards points).
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { start } from "./harness.mjs";

const mf = await start("tests/d1-worker", { migrate: false });

describe("Analytics Engine telemetry", () => {
  after(() => mf.dispose());

  it("writes one summed point per topic, outcome and error type, and a backlog point", async () => {
    const response = await mf.dispatchFetch("http://worker/analytics/drain", { method: "POST" });
    assert.equal(response.status, 200, await response.clone().text());
    const { delivered, dead, points } = await response.json();
    assert.deepEqual([delivered, dead], [3, 1]);
    assert.equal(points.length, 3, JSON.stringify(points));
    const [backlog, mail, hooks] = points;
    assert.deepEqual(backlog.indexes, ["analytics_outbox"]);
    assert.deepEqual(backlog.blobs, ["analytics_outbox", "", "backlog", ""]);
    assert.equal(backlog.doubles[0], 4, "four messages due as the drain started");
    assert.deepEqual(mail.indexes, ["analytics_outbox:mail"]);
    assert.deepEqual(mail.blobs, ["analytics_outbox", "mail", "delivered", ""]);
    assert.equal(mail.doubles.length, 10);
    assert.equal(mail.doubles[0], 3, "three messages in one point");
    assert.equal(mail.doubles[1], 3, "three deliveries timed");
    assert.deepEqual(hooks.blobs, ["analytics_outbox", "hooks", "dead", "permanent"]);
    assert.equal(hooks.doubles[0], 1);
    assert.ok(
      points.every((point) => !JSON.stringify(point).includes("ada@example.com")),
      "no payload in a data point",
    );
  });
});
