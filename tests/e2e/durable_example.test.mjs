// The Durable Object example (examples/durable-webhooks) end to end: events
// recorded per customer object, their webhooks delivered by the objects'
// alarms through the HTTP deliverer, applied once by the receiving inbox
// although every first acknowledgement is lost, in order per customer; a
// refused webhook dead-lettered and replayed through the admin routes; a
// webhook that always fails, alone in its object, dead after its attempts.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import path from "node:path";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { eventually, root, start } from "./harness.mjs";

const TOKEN = "test-admin-token";
const MAX_ATTEMPTS = 4;
const admin = { authorization: `Bearer ${TOKEN}` };

/**
 * Stands between the objects and the receiving route: the first delivery of
 * each webhook reaches the receiver but its answer is lost (500); webhooks of
 * type "refused" are refused (400) until `state.accept` is set; webhooks of
 * type "failing" always get a 500.
 */
async function lossyLink(forward) {
  const state = { seen: new Map(), accept: false };
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", async () => {
      const key = request.headers["idempotency-key"];
      const hook = JSON.parse(body);
      state.seen.set(key, (state.seen.get(key) ?? 0) + 1);
      if (hook.type === "refused" && !state.accept) return response.writeHead(400).end("refused");
      if (hook.type === "failing") return response.writeHead(500).end("this webhook always fails");
      // After the suite, the Worker may be gone while an alarm still delivers.
      const answer = await forward(key, body).catch(() => null);
      if (!answer) return response.writeHead(503).end("receiver gone");
      if (state.seen.get(key) === 1) return response.writeHead(500).end("lost");
      response.writeHead(answer.status).end(await answer.text());
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  state.url = `http://127.0.0.1:${server.address().port}/hooks`;
  state.close = () => server.close();
  return state;
}

let mf;
const link = await lossyLink((key, body) =>
  mf.dispatchFetch("http://example.test/hooks", {
    method: "POST",
    headers: { "idempotency-key": key, "content-type": "application/json" },
    body,
  }),
);
mf = await start("examples/durable-webhooks", {
  migrate: false,
  bindings: {
    WEBHOOK_URL: link.url,
    ADMIN_TOKEN: TOKEN,
    BACKOFF_BASE_MS: "100",
    BACKOFF_CAP_MS: "200",
    MAX_ATTEMPTS: String(MAX_ATTEMPTS),
  },
  // The objects as the example's wrangler.toml declares them.
  durableObjects: unstable_getMiniflareWorkerOptions(path.join(root, "examples/durable-webhooks/wrangler.toml"))
    .workerOptions.durableObjects,
});
after(async () => {
  link.close();
  await mf.dispose();
});

const call = async (path, init = {}) => {
  const response = await mf.dispatchFetch(`http://example.test${path}`, init);
  return { status: response.status, body: await response.json() };
};
const record = (customer, type, data = {}) =>
  call(`/customers/${customer}/events`, { method: "POST", body: JSON.stringify({ type, data }) });

describe("durable-webhooks example", () => {
  it("applies every customer's webhooks once, in order, despite lost acknowledgements", async () => {
    const sent = { ada: [], bob: [] };
    for (let n = 0; n < 6; n++) {
      for (const customer of ["ada", "bob"]) {
        const { status, body } = await record(customer, `step-${n}`, { n });
        assert.equal(status, 201);
        sent[customer].push(body.event_id);
      }
    }
    const received = await eventually(
      async () => {
        const { body } = await call("/hooks");
        return body.length === 12 && body;
      },
      { timeoutMs: 15_000 },
    );
    for (const customer of ["ada", "bob"]) {
      const order = received.filter((r) => r.customer === customer).map((r) => r.key);
      assert.deepEqual(order, sent[customer], `${customer}'s webhooks in order, once each`);
      // The last acknowledgement is settled within the drain's flush interval.
      await eventually(async () => {
        const { body: stats } = await call(`/admin/customers/${customer}/outbox`, { headers: admin });
        return stats.pending === 0 && stats.dead === 0;
      });
      const { body: events } = await call(`/customers/${customer}/events`);
      assert.deepEqual(events.map((e) => e.id), sent[customer]);
    }
    // Every webhook was delivered at least twice: the first answer was lost.
    for (const key of [...sent.ada, ...sent.bob]) assert.ok(link.seen.get(key) >= 2, key);
  });

  it("dead-letters a refused webhook, shows it per object, and replays it", async () => {
    const { body } = await record("carol", "refused");
    const dead = await eventually(async () => {
      const { body: list } = await call("/admin/customers/carol/outbox/dead", { headers: admin });
      return list.length === 1 && list[0];
    });
    assert.equal(dead.id, body.event_id);
    const { body: others } = await call("/admin/customers/ada/outbox/dead", { headers: admin });
    assert.deepEqual(others, []);
    link.accept = true;
    const replay = await call(`/admin/customers/carol/outbox/dead/${dead.id}/replay`, { method: "POST", headers: admin });
    assert.equal(replay.status, 200);
    await eventually(async () => (await call("/hooks")).body.some((r) => r.key === dead.id), { timeoutMs: 10_000 });
  });

  it("purges a customer's dead letters, which lets its later webhooks go", async () => {
    link.accept = false;
    const refused = (await record("dave", "refused")).body.event_id;
    await eventually(async () => (await call("/admin/customers/dave/outbox/dead", { headers: admin })).body.length === 1);
    // Ordered behind the dead one, the next webhook waits.
    const next = (await record("dave", "after")).body.event_id;
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.ok(!(await call("/hooks")).body.some((r) => r.key === next));
    const purge = await call("/admin/customers/dave/outbox/dead/purge", { method: "POST", headers: admin });
    assert.deepEqual(purge.body, { purged: 1 });
    await eventually(async () => (await call("/hooks")).body.some((r) => r.key === next));
    assert.ok(!(await call("/hooks")).body.some((r) => r.key === refused));
  });

  it("kills a webhook that always fails alone after its attempts, and holds its customer's next", async () => {
    // The customer's webhooks share an ordering key: the failing one is the
    // only one each alarm can deliver. Nothing else shows the receiver at
    // fault, so each failure spends an attempt at the policy's backoff.
    const failing = (await record("erin", "failing")).body.event_id;
    const next = (await record("erin", "after")).body.event_id;
    const dead = await eventually(
      async () => {
        const { body: list } = await call("/admin/customers/erin/outbox/dead", { headers: admin });
        return list.length === 1 && list[0];
      },
      { timeoutMs: 15_000 },
    );
    assert.equal(dead.id, failing);
    assert.equal(dead.attempts, MAX_ATTEMPTS);
    assert.match(dead.last_error, /attempts exhausted/);
    assert.equal(link.seen.get(failing), MAX_ATTEMPTS, "one delivery per attempt");
    // Ordered behind its dead head, the next webhook waits.
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.ok(!(await call("/hooks")).body.some((r) => r.key === next));
    const { body: stats } = await call("/admin/customers/erin/outbox", { headers: admin });
    assert.equal(stats.pending, 1);
  });

  it("refuses bad input and unauthenticated admin calls", async () => {
    assert.equal((await call("/customers/ada/events", { method: "POST", body: "not json" })).status, 400);
    assert.equal((await call("/admin/customers/ada/outbox")).status, 401);
    assert.equal((await call(`/customers/${"x".repeat(65)}/events`)).status, 400);
  });
});
