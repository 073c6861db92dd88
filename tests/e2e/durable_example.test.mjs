// The Durable Object example (examples/durable-webhooks) end to end: each
// customer registers an endpoint, its events are recorded per customer
// object and published to it in the same write, delivered by the objects'
// alarms through the endpoint deliverer, applied once by the receiving inbox
// although every first acknowledgement is lost, in order per customer; a
// refused webhook dead-lettered and replayed through each object's console; a
// webhook that always fails, alone in its object, dead after its attempts;
// every webhook signed (Standard Webhooks) and verified by the receiver,
// which refuses an unsigned, tampered or stale one and applies nothing.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { createServer } from "node:http";
import path from "node:path";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { eventually, root, start } from "./harness.mjs";

const TOKEN = "test-admin-token";
const MAX_ATTEMPTS = 4;
const admin = { authorization: `Bearer ${TOKEN}` };
const SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SIGNED = ["webhook-id", "webhook-timestamp", "webhook-signature"];

/** Standard Webhooks' signature, computed apart from the library (node's HMAC). */
const signature = (id, timestamp, body, secret = SECRET) =>
  "v1," +
  createHmac("sha256", Buffer.from(secret.slice("whsec_".length), "base64"))
    .update(`${id}.${timestamp}.${body}`)
    .digest("base64");

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
      const key = request.headers["webhook-id"];
      const signed = Object.fromEntries(SIGNED.map((name) => [name, request.headers[name]]));
      const hook = JSON.parse(body);
      state.seen.set(key, (state.seen.get(key) ?? 0) + 1);
      if (hook.type === "refused" && !state.accept) return response.writeHead(400).end("refused");
      if (hook.type === "failing") return response.writeHead(500).end("this webhook always fails");
      // After the suite, the Worker may be gone while an alarm still delivers.
      const answer = await forward(signed, body).catch(() => null);
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
const link = await lossyLink((signed, body) =>
  mf.dispatchFetch("http://example.test/hooks", {
    method: "POST",
    headers: { ...signed, "content-type": "application/json" },
    body,
  }),
);
mf = await start("examples/durable-webhooks", {
  migrate: false,
  bindings: {
    WEBHOOK_SECRET: SECRET,
    ENDPOINTS_ALLOW_LOCAL: "1",
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
/** A customer object's console API (its outbox is named "webhooks"). */
const consoleApi = (customer, route = "", { method = "GET", body } = {}) =>
  call(`/admin/customers/${customer}/console/api/outboxes/webhooks${route}`, {
    method,
    headers: method === "GET" ? admin : { ...admin, "content-type": "application/json", "x-outbox-console": "1" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
const deadLetters = async (customer) => (await consoleApi(customer, "/messages?state=dead")).body.messages;
/** Messages not yet delivered and not dead: due, scheduled, leased or waiting. */
const undelivered = async (customer) => {
  const { counts } = (await consoleApi(customer)).body;
  return ["due", "scheduled", "leased", "waiting"].reduce((sum, state) => sum + counts[state].count, 0);
};
/** Each customer's one endpoint: the lossy link to the receiver, signed with SECRET. */
const endpoints = new Map();
const endpointOf = async (customer) => {
  if (!endpoints.has(customer)) {
    const { status, body } = await call(`/customers/${customer}/endpoints`, {
      method: "POST",
      body: JSON.stringify({ url: link.url, secret: SECRET }),
    });
    assert.equal(status, 201, JSON.stringify(body));
    endpoints.set(customer, body.id);
  }
  return endpoints.get(customer);
};
const record = async (customer, type, data = {}) => {
  await endpointOf(customer);
  return call(`/customers/${customer}/events`, { method: "POST", body: JSON.stringify({ type, data }) });
};
/** The outbox row of an event's delivery to the customer's endpoint. */
const deliveryOf = async (customer, eventId) => `${eventId}:${await endpointOf(customer)}`;

describe("durable-webhooks example", () => {
  it("applies every customer's webhooks once, in order, despite lost acknowledgements", async () => {
    const sent = { ada: [], bob: [] };
    for (let n = 0; n < 6; n++) {
      for (const customer of ["ada", "bob"]) {
        const { status, body } = await record(customer, `step-${n}`, { n });
        assert.equal(status, 201);
        assert.equal(body.endpoints, 1);
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
      await eventually(async () => (await undelivered(customer)) === 0 && (await deadLetters(customer)).length === 0);
      const { body: events } = await call(`/customers/${customer}/events`);
      assert.deepEqual(events.map((e) => e.id), sent[customer]);
    }
    // Every webhook was delivered at least twice: the first answer was lost.
    for (const key of [...sent.ada, ...sent.bob]) assert.ok(link.seen.get(key) >= 2, key);
  });

  it("verifies a webhook's signature and refuses an unsigned, tampered, stale or missigned one", async () => {
    const now = Math.floor(Date.now() / 1000);
    const body = JSON.stringify({ customer: "dora", type: "signed-by-hand" });
    const post = (headers, text = body) =>
      call("/hooks", { method: "POST", headers: { ...headers, "content-type": "application/json" }, body: text });
    const headers = (id, timestamp, text = body, secret = SECRET) => ({
      "webhook-id": id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": signature(id, timestamp, text, secret),
    });
    // Signed apart from the library, with the shared secret: verified, applied once.
    const good = await post(headers("msg_by_hand", now));
    assert.equal(good.status, 201, JSON.stringify(good.body));
    assert.equal((await post(headers("msg_by_hand", now))).status, 200);
    const refusals = [
      ["unsigned", {}, body, 401],
      ["tampered body", headers("msg_tampered", now), body.replace("dora", "eve"), 401],
      ["another secret", headers("msg_stranger", now, body, "whsec_c3RyYW5nZXI="), body, 401],
      ["stale", headers("msg_stale", now - 600), body, 401],
      ["from the future", headers("msg_future", now + 600), body, 401],
    ];
    for (const [what, sent, text, status] of refusals) {
      const refused = await post(sent, text);
      assert.equal(refused.status, status, `${what}: ${JSON.stringify(refused.body)}`);
    }
    // Nothing of a refused webhook was applied.
    const keys = (await call("/hooks")).body.map((r) => r.key);
    assert.ok(keys.includes("msg_by_hand"));
    for (const id of ["msg_tampered", "msg_stranger", "msg_stale", "msg_future"]) assert.ok(!keys.includes(id), id);
  });

  it("dead-letters a refused webhook, shows it per object, and replays it", async () => {
    const { body } = await record("carol", "refused");
    const dead = await eventually(async () => {
      const list = await deadLetters("carol");
      return list.length === 1 && list[0];
    });
    assert.equal(dead.id, await deliveryOf("carol", body.event_id));
    assert.deepEqual(await deadLetters("ada"), []);
    link.accept = true;
    const replay = await consoleApi("carol", "/dead/replay", { method: "POST", body: { ids: [dead.id] } });
    assert.deepEqual([replay.status, replay.body.done], [200, 1]);
    await eventually(async () => (await call("/hooks")).body.some((r) => r.key === body.event_id), { timeoutMs: 10_000 });
  });

  it("purges a customer's dead letters, which lets its later webhooks go", async () => {
    link.accept = false;
    const refused = (await record("dave", "refused")).body.event_id;
    await eventually(async () => (await deadLetters("dave")).length === 1);
    // Ordered behind the dead one, the next webhook waits.
    const next = (await record("dave", "after")).body.event_id;
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.ok(!(await call("/hooks")).body.some((r) => r.key === next));
    const purge = await consoleApi("dave", "/dead/purge", { method: "POST", body: { ids: [await deliveryOf("dave", refused)] } });
    assert.deepEqual(purge.body, { selected: 1, done: 1, more: false });
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
        const list = await deadLetters("erin");
        return list.length === 1 && list[0];
      },
      { timeoutMs: 15_000 },
    );
    assert.equal(dead.id, await deliveryOf("erin", failing));
    assert.equal(dead.attempts, MAX_ATTEMPTS);
    assert.match(dead.last_error, /attempts exhausted/);
    assert.equal(link.seen.get(failing), MAX_ATTEMPTS, "one delivery per attempt");
    // Ordered behind its dead head, the next webhook waits.
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.ok(!(await call("/hooks")).body.some((r) => r.key === next));
    assert.equal(await undelivered("erin"), 1);
  });

  it("refuses bad input and unauthenticated console calls", async () => {
    assert.equal((await call("/customers/ada/events", { method: "POST", body: "not json" })).status, 400);
    assert.equal((await call("/admin/customers/ada/console/api/outboxes/webhooks")).status, 401);
    const page = await mf.dispatchFetch("http://example.test/admin/customers/ada/console/");
    assert.equal(page.status, 200, "each customer object serves its console's page");
    assert.match(page.headers.get("content-security-policy"), /frame-ancestors 'none'/);
    assert.equal((await call(`/customers/${"x".repeat(65)}/events`)).status, 400);
  });
});
