// The Durable Object example under `wrangler dev`, as a newcomer runs it
// (`npm run dev:durable`), fed the bad requests a real client sends: an
// oversized event (declared, and streamed without a length), a webhook
// without its signature, a lower-case bearer scheme. Each gets its
// answer, and the request after it is served and recorded: no request
// leaves the isolate to be restarted. (Under Miniflare's dispatchFetch the
// unread forwarded body never broke the next request; under wrangler dev it
// did.)
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { eventually, root } from "./harness.mjs";

const TOKEN = "test-admin-token";

/** A port nothing listens on. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

describe("the Durable Object example under wrangler dev", () => {
  let dev;
  let log = "";
  let base;
  let state;

  before(async () => {
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    state = mkdtempSync(path.join(tmpdir(), "durable-dev-"));
    dev = spawn(
      "npx",
      [
        "wrangler", "dev",
        "--config", "examples/durable-webhooks/wrangler.toml",
        "--local", "--ip", "127.0.0.1", "--port", String(port),
        "--persist-to", state,
        "--var", `ADMIN_TOKEN:${TOKEN}`,
        "--var", "WEBHOOK_SECRET:whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "--show-interactive-dev-session=false",
      ],
      {
        cwd: root,
        env: { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false", CI: "true" },
        stdio: ["ignore", "pipe", "pipe"],
        detached: true,
      },
    );
    for (const stream of [dev.stdout, dev.stderr]) {
      stream.on("data", (chunk) => {
        log += chunk.toString();
        if (process.env.E2E_VERBOSE) process.stderr.write(chunk);
      });
    }
    await eventually(() => log.includes("Ready on"), { timeoutMs: 60_000 });
  });

  after(() => {
    if (dev?.pid) {
      try {
        process.kill(-dev.pid, "SIGTERM");
      } catch {}
    }
    rmSync(state, { recursive: true, force: true });
  });

  const post = (route, body, headers = {}) =>
    fetch(`${base}${route}`, { method: "POST", body, headers: { "content-type": "application/json", ...headers } });
  const events = async (customer) => (await fetch(`${base}/customers/${customer}/events`)).json();
  const valid = async (customer, type) => {
    const response = await post(`/customers/${customer}/events`, JSON.stringify({ type, data: { n: 1 } }));
    assert.equal(response.status, 201, `${type}: ${await response.clone().text()}`);
    assert.ok((await events(customer)).some((event) => event.type === type), `${type} was not recorded`);
  };
  // What the dev server printed since `mark`, if it shows a broken request.
  const broke = (mark) => /Uncaught|restarted mid-request/.test(log.slice(mark));

  it("answers an oversized event 413 and serves the next request", async () => {
    const mark = log.length;
    const big = JSON.stringify({ type: "big", data: "x".repeat(20 * 1024) });
    const response = await post("/customers/ada/events", big);
    assert.equal(response.status, 413);
    assert.match((await response.json()).error, /16 KiB/);
    await valid("ada", "after-413");
    assert.ok(!broke(mark), log.slice(mark));
  });

  it("answers an oversized event streamed without a length 413 and serves the next request", async () => {
    const mark = log.length;
    const chunk = new TextEncoder().encode("x".repeat(4096));
    let sent = 0;
    const body = new ReadableStream({
      pull(controller) {
        if (sent === 0) controller.enqueue(new TextEncoder().encode('{"type":"big","data":"'));
        if (sent >= 8) {
          controller.enqueue(new TextEncoder().encode('"}'));
          controller.close();
          return;
        }
        sent += 1;
        controller.enqueue(chunk);
      },
    });
    const response = await fetch(`${base}/customers/grace/events`, { method: "POST", body, duplex: "half" });
    assert.equal(response.status, 413);
    await valid("grace", "after-streamed-413");
    assert.ok(!broke(mark), log.slice(mark));
  });

  it("answers an unsigned webhook 401 and serves the next request", async () => {
    const mark = log.length;
    const response = await post("/hooks", JSON.stringify({ customer: "ada", type: "x" }));
    assert.equal(response.status, 401);
    assert.match((await response.json()).error, /webhook-signature/);
    await valid("ada", "after-unsigned-hook");
    assert.ok(!broke(mark), log.slice(mark));
  });

  it("takes the bearer scheme in any case, and says how to authenticate when refused", async () => {
    const mark = log.length;
    const outbox = (authorization) =>
      fetch(`${base}/admin/customers/ada/console/api/outboxes/webhooks`, { headers: authorization ? { authorization } : {} });
    for (const scheme of ["Bearer", "bearer", "BEARER"]) {
      assert.equal((await outbox(`${scheme} ${TOKEN}`)).status, 200, scheme);
    }
    for (const wrong of [undefined, "Bearer nope", `Basic ${TOKEN}`]) {
      const refused = await outbox(wrong);
      assert.equal(refused.status, 401, String(wrong));
      assert.equal(refused.headers.get("www-authenticate"), 'Bearer realm="outbox console"');
    }
    assert.ok(!broke(mark), log.slice(mark));
  });
});
