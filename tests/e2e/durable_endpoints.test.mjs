// The Durable Object example's endpoints, end to end: 10 customers register 3
// endpoints each (one healthy, one answering 410, one down for a while); every
// event a customer records fans out to its endpoints in the same atomic write.
// The healthy and the recovering endpoints receive every event once, in order,
// signed with their own secret under one webhook-id per event; the 410 one is
// disabled alone, holds what it was sent, and gets no new events.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { createServer } from "node:http";
import path from "node:path";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { eventually, root, start } from "./harness.mjs";

const CUSTOMERS = Array.from({ length: 10 }, (_, n) => `customer-${n}`);
const EVENTS = 4;

/** Standard Webhooks' signature, computed apart from the library (node's HMAC). */
const signature = (id, timestamp, body, secret) =>
  "v1," +
  createHmac("sha256", Buffer.from(secret.slice("whsec_".length), "base64"))
    .update(`${id}.${timestamp}.${body}`)
    .digest("base64");

/**
 * The customers' receivers, on one loopback server: `/ok/<c>` accepts,
 * `/gone/<c>` answers 410, `/down/<c>` answers 503 until `state.up`. What a
 * receiver accepted is recorded per path, in arrival order, with whether its
 * signature verified under the secret registered for that path.
 */
async function receivers() {
  const state = { up: false, secrets: new Map(), received: new Map(), calls: new Map() };
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      const where = request.url;
      state.calls.set(where, (state.calls.get(where) ?? 0) + 1);
      if (where.startsWith("/gone/")) return response.writeHead(410).end("endpoint removed");
      if (where.startsWith("/down/") && !state.up) return response.writeHead(503).end("down for maintenance");
      const id = request.headers["webhook-id"];
      if (!state.secrets.has(where)) return response.writeHead(204).end();
      const expected = signature(id, request.headers["webhook-timestamp"], body, state.secrets.get(where));
      const verified = (request.headers["webhook-signature"] ?? "").split(" ").includes(expected);
      const list = state.received.get(where) ?? [];
      list.push({ id, verified, body: JSON.parse(body) });
      state.received.set(where, list);
      response.writeHead(204).end();
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  state.base = `http://127.0.0.1:${server.address().port}`;
  state.close = () => server.close();
  return state;
}

const hooks = await receivers();
const mf = await start("examples/durable-webhooks", {
  migrate: false,
  bindings: {
    // What the example's own demo receiver (/hooks) verifies with; unused here.
    WEBHOOK_SECRET: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    ENDPOINTS_ALLOW_LOCAL: "1",
    ADMIN_TOKEN: "test-admin-token",
    BACKOFF_BASE_MS: "100",
    BACKOFF_CAP_MS: "300",
    BREAKER_COOLDOWN_MS: "300",
    MAX_ATTEMPTS: "50",
  },
  durableObjects: unstable_getMiniflareWorkerOptions(path.join(root, "examples/durable-webhooks/wrangler.toml"))
    .workerOptions.durableObjects,
});
after(async () => {
  hooks.close();
  await mf.dispose();
});

const call = async (path, init = {}) => {
  const response = await mf.dispatchFetch(`http://example.test${path}`, init);
  return { status: response.status, body: await response.json() };
};
const post = (path, body) => call(path, { method: "POST", body: JSON.stringify(body) });

describe("durable-webhooks example: endpoints", () => {
  it("fans each event out to its customer's endpoints; a 410 disables one alone", async () => {
    const endpoints = new Map();
    for (const customer of CUSTOMERS) {
      for (const kind of ["ok", "gone", "down"]) {
        const where = `/${kind}/${customer}`;
        const secret = `whsec_${randomBytes(32).toString("base64")}`;
        hooks.secrets.set(where, secret);
        const { status, body } = await post(`/customers/${customer}/endpoints`, {
          url: `${hooks.base}${where}`,
          secret,
          event_types: ["order.paid"],
          // The healthy receiver takes 20 a second at most: a rate of its own.
          ...(kind === "ok" ? { rate_limit_per_second: 20 } : {}),
        });
        assert.equal(status, 201, JSON.stringify(body));
        assert.equal(body.owner, customer);
        assert.equal(body.rate_limit_per_second, kind === "ok" ? 20 : null);
        assert.ok(!JSON.stringify(body).includes(secret), "the secret is never shown");
        endpoints.set(where, body.id);
      }
    }
    // The operator's endpoint in each customer's object, told of what goes wrong there.
    for (const customer of CUSTOMERS) {
      const where = `/ops/${customer}`;
      const secret = `whsec_${randomBytes(32).toString("base64")}`;
      hooks.secrets.set(where, secret);
      const body = JSON.stringify({ url: `${hooks.base}${where}`, secret, event_types: ["outbox.endpoint.disabled"] });
      const anonymous = await call(`/admin/customers/${customer}/endpoints`, { method: "POST", body });
      assert.equal(anonymous.status, 401);
      const { status } = await call(`/admin/customers/${customer}/endpoints`, {
        method: "POST",
        headers: { authorization: "Bearer test-admin-token" },
        body,
      });
      assert.equal(status, 201);
    }
    // Another customer's endpoint is not found, nor enabled, through this one.
    const theirs = endpoints.get(`/ok/${CUSTOMERS[1]}`);
    assert.equal((await post(`/customers/${CUSTOMERS[0]}/endpoints/${theirs}/enable`, {})).status, 404);

    const published = new Map();
    for (let n = 0; n < EVENTS; n++) {
      for (const customer of CUSTOMERS) {
        const { status, body } = await post(`/customers/${customer}/events`, { type: "order.paid", data: { n } });
        assert.equal(status, 201, JSON.stringify(body));
        // Once its 410 came, the gone endpoint is given no new events.
        assert.ok(body.endpoints === 3 || body.endpoints === 2, JSON.stringify(body));
        published.set(customer, [...(published.get(customer) ?? []), body.event_id]);
      }
    }
    const receivedBy = (where) => (hooks.received.get(where) ?? []).map((r) => r.id);
    await eventually(() => CUSTOMERS.every((c) => receivedBy(`/ok/${c}`).length >= EVENTS), { timeoutMs: 30_000 });
    for (const customer of CUSTOMERS) {
      const where = `/ok/${customer}`;
      assert.deepEqual(receivedBy(where), published.get(customer), `${where}: every event once, in order`);
      assert.ok(hooks.received.get(where).every((r) => r.verified && r.body.customer === customer));
    }

    // The 410 disabled each gone endpoint, and only it.
    await eventually(async () => {
      const { body } = await call(`/customers/${CUSTOMERS[9]}/endpoints`);
      return body.find((e) => e.id === endpoints.get(`/gone/${CUSTOMERS[9]}`))?.state === "disabled";
    });
    for (const customer of CUSTOMERS) {
      const { body } = await call(`/customers/${customer}/endpoints`);
      const state = (kind) => body.find((e) => e.id === endpoints.get(`/${kind}/${customer}`));
      assert.equal(state("gone").state, "disabled");
      assert.match(state("gone").reason, /410/);
      assert.equal(state("ok").state, "enabled");
      assert.equal(hooks.calls.get(`/gone/${customer}`), 1, "one call: the first 410 disabled it");
    }
    // Each object told its operator, once, which endpoint its 410 disabled.
    await eventually(() => CUSTOMERS.every((c) => (hooks.received.get(`/ops/${c}`) ?? []).length >= 1));
    for (const customer of CUSTOMERS) {
      const told = hooks.received.get(`/ops/${customer}`);
      assert.equal(told.length, 1, JSON.stringify(told));
      assert.ok(told[0].verified);
      assert.equal(told[0].body.type, "outbox.endpoint.disabled");
      assert.equal(told[0].body.endpoint_id, endpoints.get(`/gone/${customer}`));
      assert.match(told[0].body.reason, /410/);
    }
    const attempts = await call(`/customers/${CUSTOMERS[0]}/endpoints/${endpoints.get(`/gone/${CUSTOMERS[0]}`)}/attempts`);
    assert.equal(attempts.status, 200);
    assert.equal(attempts.body[0].status, 410);
    assert.equal(attempts.body[0].body, "endpoint removed");

    // The receiver that was down comes back: it gets every event, once, in order.
    hooks.up = true;
    await eventually(() => CUSTOMERS.every((c) => receivedBy(`/down/${c}`).length >= EVENTS), { timeoutMs: 30_000 });
    for (const customer of CUSTOMERS) {
      assert.deepEqual(receivedBy(`/down/${customer}`), published.get(customer), `/down/${customer}`);
      assert.ok(hooks.received.get(`/down/${customer}`).every((r) => r.verified));
    }
    assert.equal(hooks.received.get(`/gone/${CUSTOMERS[0]}`), undefined);
  });
});
