// The fleet view of the Durable Object example: three customers' objects
// (one healthy, one whose receiver refuses for good, one whose receiver is
// down) report their outboxes into D1 from their own alarms; the operator's
// console at /admin/console/ lists them, most dead letters or most overdue
// first, each linking to that customer's own console — over the API and in
// Chromium (screenshots at desktop and phone widths with CONSOLE_SCREENSHOTS).
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import path from "node:path";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { eventually, launchChromium, root, start } from "./harness.mjs";

const TOKEN = "test-admin-token";
const auth = { authorization: `Bearer ${TOKEN}` };
/** A receiver's answer that holds a tag and a direction override: shown as text, isolated. */
const REFUSAL = "no such mailbox <img src=x onerror=alert(1)> \u202Eevil";

/** `/ok` accepts; `/refuse` answers 422 (for good); `/down` answers 503 (for now). */
async function receivers() {
  const server = createServer((request, response) => {
    request.resume();
    request.on("end", () => {
      if (request.url.startsWith("/refuse")) return response.writeHead(422).end(REFUSAL);
      if (request.url.startsWith("/down")) return response.writeHead(503).end("down for maintenance");
      response.writeHead(204).end();
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { base: `http://127.0.0.1:${server.address().port}`, close: () => server.close() };
}

/** Each customer, and the receiver its one endpoint points at. */
const CUSTOMERS = { alpha: "ok", beta: "refuse", gamma: "down" };

async function fleetExample() {
  const hooks = await receivers();
  const mf = await start("examples/durable-webhooks", {
    migrations: "examples/durable-webhooks/migrations",
    bindings: {
      WEBHOOK_SECRET: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
      ENDPOINTS_ALLOW_LOCAL: "1",
      ADMIN_TOKEN: TOKEN,
      BACKOFF_BASE_MS: "60000",
      BACKOFF_CAP_MS: "60000",
    },
    durableObjects: unstable_getMiniflareWorkerOptions(path.join(root, "examples/durable-webhooks/wrangler.toml"))
      .workerOptions.durableObjects,
  });
  const url = await mf.ready;
  const call = (route, init = {}) => mf.dispatchFetch(new URL(route, url), init);
  const json = async (route, init = {}) => {
    const response = await call(route, init);
    return { status: response.status, body: await response.json() };
  };
  for (const [customer, receiver] of Object.entries(CUSTOMERS)) {
    const registered = await json(`/customers/${customer}/endpoints`, {
      method: "POST",
      body: JSON.stringify({ url: `${hooks.base}/${receiver}`, secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" }),
    });
    assert.equal(registered.status, 201, JSON.stringify(registered.body));
    const recorded = await json(`/customers/${customer}/events`, {
      method: "POST",
      body: JSON.stringify({ type: "order.paid", data: { customer } }),
    });
    assert.equal(recorded.status, 201, JSON.stringify(recorded.body));
  }
  const fleet = (query = "") => json(`/admin/console/api/fleet${query}`, { headers: auth });
  // Each object's alarm drains, then reports: all three rows, as they ended.
  await eventually(async () => {
    const { body } = await fleet();
    const by = Object.fromEntries((body.members ?? []).map((m) => [m.member, m]));
    return by.alpha && by.beta?.dead === 1 && by.gamma?.last_error?.includes("503");
  }, { timeoutMs: 30_000 });
  return { mf, hooks, url, call, json, fleet };
}

describe("the fleet view of the Durable Object example", () => {
  let w;
  before(async () => (w = await fleetExample()));
  after(async () => {
    w?.hooks.close();
    await w?.mf.dispose();
  });

  it("lists each object's outbox as its alarm reported it, and links to its console", async () => {
    const { status, body } = await w.fleet();
    assert.equal(status, 200);
    assert.equal(body.order, "name");
    assert.deepEqual(body.members.map((m) => m.member), ["alpha", "beta", "gamma"]);
    const [alpha, beta, gamma] = body.members;
    assert.deepEqual([alpha.backlog, alpha.dead, alpha.oldest_due_at_ms, alpha.last_error], [0, 0, null, null]);
    assert.deepEqual([beta.backlog, beta.dead], [0, 1]);
    assert.ok(beta.last_error.includes("no such mailbox <img"), beta.last_error);
    assert.deepEqual([gamma.backlog, gamma.dead], [1, 0]);
    assert.ok(body.members.every((m) => m.outbox === "outbox" && m.reported_at_ms > 0));
    assert.equal(beta.console, "/admin/customers/beta/console/");
    // The link leads to that customer's own console.
    const session = await w.json(`${beta.console}api/session`, { headers: auth });
    assert.equal(session.status, 200);
    assert.deepEqual(session.body.outboxes, ["webhooks"]);
    const dead = await w.json(`${beta.console}api/outboxes/webhooks`, { headers: auth });
    assert.equal(dead.body.counts.dead.count, 1, JSON.stringify(dead.body));
  });

  it("orders by dead letters or by the most overdue, and pages from where a page ended", async () => {
    assert.deepEqual((await w.fleet("?order=dead")).body.members.map((m) => m.member), ["beta"]);
    assert.deepEqual((await w.fleet("?order=oldest_due")).body.members, []);
    const first = (await w.fleet("?limit=2")).body;
    assert.deepEqual(first.members.map((m) => m.member), ["alpha", "beta"]);
    assert.ok(first.next);
    const second = (await w.fleet(`?limit=2&after=${encodeURIComponent(first.next)}`)).body;
    assert.deepEqual(second.members.map((m) => m.member), ["gamma"]);
    assert.equal(second.next, null);
    for (const bad of ["?order=size", "?limit=0", "?limit=101", "?after=nonsense"]) {
      const { status, body } = await w.fleet(bad);
      assert.equal(status, 400, `${bad}: ${JSON.stringify(body)}`);
    }
  });

  it("reports a change made in a member's console at once, though nothing is due", async () => {
    const console = "/admin/customers/beta/console/api/outboxes/webhooks";
    const dead = await w.json(`${console}/messages?state=dead`, { headers: auth });
    const ids = dead.body.messages.map((m) => m.id);
    assert.equal(ids.length, 1);
    const purged = await w.json(`${console}/dead/purge`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json", "x-outbox-console": "1" },
      body: JSON.stringify({ ids }),
    });
    assert.equal(purged.status, 200, JSON.stringify(purged.body));
    const beta = (await w.fleet()).body.members.find((m) => m.member === "beta");
    assert.deepEqual([beta.backlog, beta.dead, beta.last_error], [0, 0, null]);
    assert.deepEqual((await w.fleet("?order=dead")).body.members, []);
  });

  it("answers no one without the operator's token", async () => {
    assert.equal((await w.call("/admin/console/api/fleet")).status, 401);
    assert.equal((await w.call("/admin/console/api/fleet", { headers: { authorization: "Bearer wrong" } })).status, 401);
    const session = await w.json("/admin/console/api/session", { headers: auth });
    assert.equal(session.body.fleet, true);
    assert.deepEqual(session.body.outboxes, []);
  });
});

describe("the fleet view, in a real browser", () => {
  let w;
  let browser;
  before(async () => {
    w = await fleetExample();
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    w?.hooks.close();
    await w?.mf.dispose();
  });

  it("lists the members, finds the one with dead letters, and opens its console", async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    const noise = [];
    page.on("pageerror", (error) => noise.push(error.message));
    page.on("dialog", (dialog) => {
      noise.push(`dialog: ${dialog.message()}`);
      return dialog.dismiss();
    });
    await page.goto(new URL("/admin/console/", w.url).href);
    await page.locator("#token").fill(TOKEN);
    await page.locator("#signin-form button").click();
    await page.locator("#fleet tr").nth(2).waitFor();
    assert.deepEqual(await page.locator("#fleet tr td:first-child").allTextContents(), ["alpha", "beta", "gamma"]);
    // No outbox of its own: only the fleet is shown.
    assert.equal(await page.locator("#counts").isVisible(), false);
    // The receiver's words are text: no element made of them, the override isolated and shown.
    const error = page.locator('#fleet tr[data-member="beta"] td.error').nth(1);
    assert.equal(await error.locator("img").count(), 0);
    assert.match(await error.textContent(), /<img src=x onerror=alert\(1\)> U\+202Eevil/);
    const shots = process.env.CONSOLE_SCREENSHOTS;
    if (shots) await page.screenshot({ path: path.resolve(root, shots, "console-fleet.png"), fullPage: true });

    await page.locator("#fleet-order").selectOption("dead");
    await eventually(async () => (await page.locator("#fleet tr").count()) === 1);
    assert.equal(await page.locator("#fleet tr td:first-child").textContent(), "beta");
    await page.locator("#fleet-order").selectOption("oldest_due");
    await page.locator("#fleet-note").filter({ hasText: "No member has a message due." }).waitFor();

    if (shots) {
      const phone = await context.newPage();
      await phone.setViewportSize({ width: 390, height: 844 });
      await phone.goto(new URL("/admin/console/", w.url).href);
      await phone.locator("#fleet tr").nth(2).waitFor();
      await phone.screenshot({ path: path.resolve(root, shots, "console-fleet-phone.png"), fullPage: true });
      await phone.close();
    }

    // Its link opens beta's own console (a console of its own, signed in to separately), its dead letter shown.
    await page.locator("#fleet-order").selectOption("dead");
    await eventually(async () => (await page.locator("#fleet tr").count()) === 1);
    await page.locator('#fleet tr[data-member="beta"] a').click();
    await page.waitForURL(/\/admin\/customers\/beta\/console\/$/);
    await page.locator("#token").fill(TOKEN);
    await page.locator("#signin-form button").click();
    await page.locator('#counts [data-state="dead"] dd').filter({ hasText: "1" }).waitFor();
    assert.deepEqual(noise, []);
    await context.close();
  });
});
