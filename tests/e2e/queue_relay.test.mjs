// Outbox → Queue → consumer inside workerd: 10,000 messages relayed into a
// Queue by drains (one cut off mid-way, as if its isolate died), consumed by
// a consumer whose effect fails on a tenth of its deliveries and which throws
// on a fifth of them right after the effect committed. Every effect is
// applied exactly once, nothing is lost, nothing reaches the dead letter
// queue, and the outbox and the Queue end empty.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { eventually, start } from "./harness.mjs";

const MESSAGES = Number(process.env.RELAY_MESSAGES ?? 10_000);

const mf = await start("tests/d1-worker", {
  migrate: false,
  queueProducers: { EVENTS: { queueName: "events" } },
  queueConsumers: {
    events: { maxBatchSize: 1, maxBatchTimeout: 0, maxRetries: 100, retryDelay: 0, deadLetterQueue: "events-dlq" },
    "events-dlq": { maxBatchSize: 100, maxBatchTimeout: 0 },
  },
});
after(() => mf.dispose());

async function call(route, init = {}) {
  const response = await mf.dispatchFetch(`http://worker/relay/${route}`, init);
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  return body;
}

describe("outbox → Queue → consumer", () => {
  it(`applies ${MESSAGES} effects exactly once through crashes at every step`, { timeout: 300_000 }, async () => {
    assert.equal(await call(`seed?count=${MESSAGES}`, { method: "POST" }), MESSAGES);
    // A drain cut off mid-way (its database dies after 3 calls, as if its
    // isolate were evicted): what it relayed but did not settle comes back
    // when its leases end (6 s), and is relayed again.
    const cut = await call("drain?die_after=3", { method: "POST" });
    assert.ok(cut.claimed > 0 && cut.claimed < MESSAGES, JSON.stringify(cut));
    assert.equal(cut.stopped.reason, "database_error", JSON.stringify(cut.stopped));
    const relayed = [];
    const state = await eventually(
      async () => {
        relayed.push(await call("drain", { method: "POST" }));
        const now = await call("state");
        return now.outbox === 0 && now.distinct_effects === MESSAGES && now;
      },
      { timeoutMs: 240_000, everyMs: 500 },
    );
    // The Queue is empty once every throw has been followed by the
    // redelivery that found its effect applied and acked it.
    let last;
    const end = await eventually(
      async () => {
        last = await call("state");
        // Each throw, and each message relayed twice (by the drain that was
        // cut off, then again), is one redelivery the inbox turned away.
        return last.already_applied === last.thrown + (last.relayed - MESSAGES) && last;
      },
      { timeoutMs: 60_000, everyMs: 500 },
    ).catch((error) => assert.fail(`${error.message}: ${JSON.stringify(last)}`));
    console.log(JSON.stringify({ end, drains: relayed.length }));
    assert.equal(end.effects, MESSAGES, "each effect applied once");
    assert.equal(end.distinct_effects, MESSAGES);
    assert.equal(end.outbox, 0);
    assert.equal(end.dead_letters, 0, "nothing reached the dead letter queue");
    assert.ok(end.thrown > 0, "the consumer threw");
    assert.ok(end.already_applied > 0, "redeliveries were seen and changed nothing");
    // Only what the cut drain relayed and never settled went twice.
    assert.ok(end.relayed >= MESSAGES && end.relayed - MESSAGES <= cut.claimed, `${end.relayed} relayed`);
    // Every relay call is one subrequest; suspects of the cut drain travel
    // in batches too, so about one call per 100 messages.
    const perMessage = end.relay_calls / end.relayed;
    console.log(`relay calls per relayed message: ${perMessage.toFixed(4)}`);
    if (MESSAGES >= 10_000) assert.ok(perMessage <= 0.011, `${perMessage} subrequests per relayed message`);
    assert.ok(state.outbox === 0);
  });

  it("leaves a message no consumer can read to the dead letter queue", async () => {
    const before = await call("state");
    assert.equal(await call("poison", { method: "POST" }), "sent");
    const after = await eventually(async () => {
      const now = await call("state");
      return now.dead_letters === before.dead_letters + 1 && now;
    }, { timeoutMs: 30_000 });
    // It changed nothing on its way there.
    assert.equal(after.effects, before.effects);
  });
});
