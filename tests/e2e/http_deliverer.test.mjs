// The library's HTTP deliverer in workerd, against a real HTTP server on
// loopback: a request that outlives its timeout is aborted (its connection
// closes at the timeout), so a hung receiver cannot keep holding the
// invocation's connections while later deliveries of the same drain go on;
// a redirect is never followed: the 3xx is a failure, and the mail dies of it;
// a 410 Gone pauses the topic (nothing attempted or spent) until it is resumed.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { consoleChange, eventually, outboxCounts, start } from "./harness.mjs";

const TOKEN = "test-admin-token";
const admin = { authorization: `Bearer ${TOKEN}` };

/**
 * A mail API that first refuses everything (503), then hangs on mail to
 * `hang-…` addresses and accepts the rest after 300 ms. Notes when each
 * request arrived and when its connection closed.
 */
async function receiver() {
  const state = { phase: "refuse", requests: [] };
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      const mail = JSON.parse(body);
      if (state.phase === "refuse") return response.writeHead(503).end();
      const seen = { to: mail.to, arrived: Date.now(), closed: null };
      state.requests.push(seen);
      response.on("close", () => (seen.closed = Date.now()));
      if (mail.to.startsWith("hang-")) return; // never answered
      setTimeout(() => response.writeHead(202).end(), 300);
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  state.url = `http://127.0.0.1:${server.address().port}/send`;
  state.close = () => server.close();
  return state;
}

describe("HTTP deliverer", () => {
  it("aborts a hung request at its timeout while the drain goes on", async () => {
    const api = await receiver();
    const mf = await start("examples/signup-mail", {
      bindings: {
        MAIL_API_URL: api.url,
        ADMIN_TOKEN: TOKEN,
        DELIVERY_TIMEOUT_MS: "1000",
        BACKOFF_BASE_MS: "50",
        BACKOFF_CAP_MS: "100",
        BREAKER_FAILURES: "0",
      },
    });
    try {
      const call = (path, init = {}) => mf.dispatchFetch(`http://example.test${path}`, init);
      const stats = () => outboxCounts(mf, TOKEN);
      const emails = [
        ...Array.from({ length: 6 }, (_, n) => `hang-${n}@example.com`),
        ...Array.from({ length: 30 }, (_, n) => `ok-${n}@example.com`),
      ];
      for (const email of emails) {
        const response = await call("/signup", { method: "POST", body: JSON.stringify({ email }) });
        assert.equal(response.status, 201);
      }
      await eventually(async () => (await stats()).pending === 36);
      await new Promise((resolve) => setTimeout(resolve, 200)); // past the backoff
      api.phase = "serve";
      const started = Date.now();
      await (await mf.getWorker()).scheduled({ cron: "*/1 * * * *" });
      const drainMs = Date.now() - started;

      const hung = api.requests.filter((r) => r.to.startsWith("hang-"));
      assert.equal(hung.length, 6);
      await eventually(() => hung.every((r) => r.closed));
      for (const request of hung) {
        const held = request.closed - request.arrived;
        // Closed by its abort at the 1 s timeout, not held for the rest of
        // the drain (which ran on for the other deliveries).
        assert.ok(held >= 900 && held < 1600, `a hung request was held ${held} ms (drain took ${drainMs} ms)`);
      }
      assert.ok(drainMs > 2000, `the drain took only ${drainMs} ms: nothing to compare with`);
      const after = await stats();
      assert.deepEqual({ pending: after.pending, dead: after.dead }, { pending: 6, dead: 0 });
    } finally {
      await mf.dispose();
      api.close();
    }
  });

  it("never follows a redirect: the 3xx is a failure, retried until the mail is dead", async () => {
    const hits = { send: 0, elsewhere: 0 };
    const server = createServer((request, response) => {
      request.resume();
      request.on("end", () => {
        if (request.url === "/elsewhere") {
          hits.elsewhere += 1;
          return response.writeHead(202).end();
        }
        hits.send += 1;
        response.writeHead(302, { location: "/elsewhere" }).end();
      });
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    const mf = await start("examples/signup-mail", {
      bindings: {
        MAIL_API_URL: `http://127.0.0.1:${server.address().port}/send`,
        ADMIN_TOKEN: TOKEN,
        MAX_ATTEMPTS: "1",
        BREAKER_FAILURES: "0",
      },
    });
    try {
      const call = (path, init = {}) => mf.dispatchFetch(`http://example.test${path}`, init);
      const signup = await call("/signup", { method: "POST", body: JSON.stringify({ email: "redirected@example.com" }) });
      assert.equal(signup.status, 201);
      // Without the breaker's judgement, its one attempt (right after the response) spends it.
      const dead = await eventually(async () => {
        const list = await (await call("/console/api/outboxes/mail/messages?state=dead", { headers: admin })).json();
        return list.messages.length === 1 && list.messages[0];
      });
      assert.match(dead.last_error, /302/);
      assert.match(dead.last_error, /attempts exhausted/, "a 3xx is retried, not parked at once");
      assert.equal(hits.send, 1);
      assert.equal(hits.elsewhere, 0, "the redirect was followed");
    } finally {
      await mf.dispose();
      server.close();
    }
  });

  it("pauses the topic on 410 Gone: nothing is attempted or spent until it is resumed", async () => {
    const api = { status: 410, hits: 0 };
    const server = createServer((request, response) => {
      request.resume();
      request.on("end", () => {
        api.hits += 1;
        response.writeHead(api.status).end(api.status === 410 ? "mailbox deleted" : "");
      });
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    const mf = await start("examples/signup-mail", {
      bindings: {
        MAIL_API_URL: `http://127.0.0.1:${server.address().port}/send`,
        ADMIN_TOKEN: TOKEN,
        MAX_ATTEMPTS: "1",
        BACKOFF_BASE_MS: "50",
        BACKOFF_CAP_MS: "100",
      },
    });
    try {
      const call = (path, init = {}) => mf.dispatchFetch(`http://example.test${path}`, init);
      const paused = async () => (await outboxCounts(mf, TOKEN)).paused;
      for (const email of ["gone-1@example.com", "gone-2@example.com"]) {
        const signup = await call("/signup", { method: "POST", body: JSON.stringify({ email }) });
        assert.equal(signup.status, 201);
      }
      // The attempt right after the first response gets the 410 and pauses the topic.
      const [topic] = await eventually(async () => {
        const list = await paused();
        return list.length === 1 && list;
      });
      assert.equal(topic.topic, "signup-confirmation");
      assert.match(topic.reason, /410: mailbox deleted/);
      assert.equal(typeof topic.paused_at_ms, "number");
      const hitsWhenPaused = api.hits;
      assert.ok(hitsWhenPaused >= 1 && hitsWhenPaused <= 2, `${hitsWhenPaused} requests`);

      // Paused: cron drains attempt nothing and spend nothing, however often they run.
      await new Promise((resolve) => setTimeout(resolve, 200));
      const worker = await mf.getWorker();
      for (let n = 0; n < 2; n += 1) await worker.scheduled({ cron: "*/1 * * * *" });
      assert.equal(api.hits, hitsWhenPaused, "a paused topic was delivered to");
      const stats = await outboxCounts(mf, TOKEN);
      assert.deepEqual({ pending: stats.pending, dead: stats.dead }, { pending: 2, dead: 0 });

      // Resumed (the receiver is back): both are delivered by the next drain.
      api.status = 202;
      const resume = { topic: "signup-confirmation" };
      const resumed = await (await consoleChange(mf, TOKEN, "outboxes/mail/topics/resume", resume)).json();
      assert.deepEqual(resumed, { topic: "signup-confirmation", paused: false, changed: true });
      assert.deepEqual(await paused(), []);
      await worker.scheduled({ cron: "*/1 * * * *" });
      const after = await outboxCounts(mf, TOKEN);
      assert.deepEqual({ pending: after.pending, dead: after.dead }, { pending: 0, dead: 0 });
    } finally {
      await mf.dispose();
      server.close();
    }
  });
});
