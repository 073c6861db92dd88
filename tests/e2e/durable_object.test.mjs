// The adapter conformance suite on a Durable Object's SQL storage inside
// workerd (one object per case), and the outbox kept in an object and
// drained by its alarm.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { eventually, start } from "./harness.mjs";

const mf = await start("tests/d1-worker", {
  migrate: false,
  durableObjects: {
    CONFORMANCE: { className: "ConformanceObject", useSQLite: true },
    ALARMED: { className: "AlarmedOutbox", useSQLite: true },
  },
});
const names = await (await mf.dispatchFetch("http://worker/cases")).json();
after(() => mf.dispose());

describe("Durable Object conformance", () => {
  for (const name of names) {
    it(name, async () => {
      const response = await mf.dispatchFetch(`http://worker/do-cases/${name}`, { method: "POST" });
      const result = await response.json();
      assert.equal(result.failure, undefined, result.failure);
      assert.equal(response.status, 200);
    });
  }
});

/** A route of the alarm-driven outbox in the object named `object`. */
async function alarmed(object, route, body) {
  const init = body === undefined ? {} : { method: "POST", body: JSON.stringify(body) };
  const response = await mf.dispatchFetch(`http://worker/alarmed/${object}/${route}`, init);
  assert.equal(response.status, 200, await response.clone().text());
  return response.json();
}

describe("an outbox in a Durable Object, drained by its alarm", () => {
  it("delivers at once, and a retry due in 2 s within 1 s of its due time", async () => {
    const enqueuedAt = Date.now();
    const [id] = await alarmed("retry", "enqueue", { messages: [{ fail: 1 }] });
    // The failed first attempt reschedules the message 2 s later.
    const row = await eventually(async () => {
      const rows = await alarmed("retry", "outbox");
      return rows.find((r) => r.id === id && r.attempts + r.deferrals === 1 && r.state === "ready");
    });
    const attempts = await eventually(async () => {
      const all = await alarmed("retry", "attempts");
      return all.some((a) => a.delivered) && all;
    });
    assert.deepEqual(
      attempts.map((a) => [a.attempt, a.delivered]),
      [
        [1, 0],
        [2, 1],
      ],
    );
    const first = attempts[0].at - enqueuedAt;
    const late = attempts[1].at - row.due_at;
    console.log(`first attempt ${first} ms after the enqueue; retry ${late} ms after its due time`);
    assert.ok(first < 1000, `first attempt ${first} ms after the enqueue`);
    assert.ok(late >= 0 && late < 1000, `retry delivered ${late} ms after its due time`);
    // Nothing is left, and no alarm is kept for an empty outbox.
    assert.deepEqual(await alarmed("retry", "outbox"), []);
    assert.equal(await alarmed("retry", "alarm"), null);
  });

  it("delivers one ordering key's messages in order, through retries", async () => {
    const plan = Array.from({ length: 12 }, (_, i) => ({ ordering_key: "customer", fail: i === 3 ? 2 : i === 7 ? 1 : 0 }));
    const ids = await alarmed("ordered", "enqueue", { messages: plan });
    const attempts = await eventually(
      async () => {
        const all = await alarmed("ordered", "attempts");
        return all.filter((a) => a.delivered).length === ids.length && all;
      },
      { timeoutMs: 15_000, everyMs: 100 },
    ).catch(async (error) => {
      // What the object holds, to tell a lost alarm from a slow one.
      const state = {
        now: Date.now(),
        alarm: await alarmed("ordered", "alarm"),
        outbox: await alarmed("ordered", "outbox"),
        attempts: await alarmed("ordered", "attempts"),
      };
      assert.fail(`${error.message}: ${JSON.stringify(state)}`);
    });
    const delivered = attempts.filter((a) => a.delivered).map((a) => a.id);
    assert.deepEqual(delivered, ids);
    // No message was attempted before every earlier one was delivered.
    for (const attempt of attempts) {
      const position = ids.indexOf(attempt.id);
      const earlier = attempts.slice(0, attempts.indexOf(attempt));
      for (const before of ids.slice(0, position)) {
        assert.ok(earlier.some((a) => a.id === before && a.delivered), `${attempt.id} attempted before ${before} was delivered`);
      }
    }
    assert.equal(attempts.length, ids.length + 3);
    assert.deepEqual(await alarmed("ordered", "outbox"), []);
  });

  it("wakes when a request that leased a message died: at the lease's end", async () => {
    const { id, until } = await alarmed("abandoned", "abandon", {});
    assert.equal(await alarmed("abandoned", "alarm"), until);
    const attempts = await eventually(async () => {
      const all = await alarmed("abandoned", "attempts");
      return all.some((a) => a.delivered) && all;
    });
    assert.equal(attempts.length, 1);
    assert.equal(attempts[0].id, id);
    const late = attempts[0].at - until;
    assert.ok(late >= 0 && late < 1000, `delivered ${late} ms after the lease ended`);
  });

  it("moves the alarm when an erasure removes what was due", async () => {
    const [kept] = await alarmed("erased", "enqueue", { messages: [{ subject: "keep", delay_ms: 120_000 }] });
    await alarmed("erased", "enqueue", { messages: [{ subject: "gone", delay_ms: 60_000 }] });
    const rows = await alarmed("erased", "outbox");
    const due = (id) => rows.find((r) => r.id === id).due_at;
    assert.equal(await alarmed("erased", "alarm"), Math.min(...rows.map((r) => r.due_at)));
    assert.equal(await alarmed("erased", "erase?gone", {}), 1);
    assert.equal(await alarmed("erased", "alarm"), due(kept));
    assert.equal(await alarmed("erased", "erase?keep", {}), 1);
    assert.equal(await alarmed("erased", "alarm"), null);
  });

  it("keeps the alarm at the next due time", async () => {
    await alarmed("armed", "enqueue", { messages: [{ fail: 5 }] });
    // Every attempt fails: after each, the alarm is the retry's due time.
    const row = await eventually(async () => {
      const rows = await alarmed("armed", "outbox");
      return rows.find((r) => r.attempts + r.deferrals === 1 && r.state === "ready");
    });
    assert.equal(await alarmed("armed", "alarm"), row.due_at);
  });
});
