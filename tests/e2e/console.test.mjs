// The operator console the example Worker mounts at /console/, in workerd:
// its JSON API from Node, and its page in a real browser (Debian's Chromium
// driven by playwright-core) — dead letters with the receiver's error,
// replay, the pause switch, a subject's export and erasure, text that must
// stay text, refused requests.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import path from "node:path";
import { eventually, root, start } from "./harness.mjs";
import { MailSink } from "./mail_sink.mjs";

const TOKEN = "test-console-token";
const HOSTILE_ERROR = "<img src=x onerror=alert(1)>";
// Its class: the status and the start of the answer, digits as `#`.
const HOSTILE_CLASS = "receiver answered 400: <img src=x onerror=alert(#)>";
const HOSTILE_EMAIL = "<script>alert(1)</script>@x.example";
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const auth = { authorization: `Bearer ${TOKEN}` };
const change = { ...auth, "content-type": "application/json", "x-outbox-console": "1" };

async function example() {
  const sink = new MailSink();
  const mf = await start("examples/signup-mail", {
    bindings: {
      MAIL_API_URL: "https://mail.test/send",
      ADMIN_TOKEN: TOKEN,
      CONSOLE_SHOW_PAYLOADS: "true",
      BACKOFF_BASE_MS: "50",
      BACKOFF_CAP_MS: "100",
    },
    outboundService: sink.handler,
  });
  const url = await mf.ready;
  const call = (route, init = {}) => mf.dispatchFetch(new URL(route, url), init);
  const api = async (route, init = {}) => {
    const response = await call(`/console/api/${route}`, { ...init, headers: { ...auth, ...init.headers } });
    return { status: response.status, body: await response.json() };
  };
  const signup = (email) =>
    call("/signup", { method: "POST", body: JSON.stringify({ email }), headers: { "content-type": "application/json" } });
  const cron = async () => (await mf.getWorker()).scheduled({ cron: "*/1 * * * *" });
  return { mf, sink, url, call, api, signup, cron };
}

describe("the operator console, over its API", () => {
  let w;
  before(async () => (w = await example()));
  after(async () => w.mf.dispose());

  it("refuses requests without credentials and cross-site changes", async () => {
    assert.equal((await w.call("/console/api/session")).status, 401);
    assert.equal((await w.call("/console/api/session", { headers: { authorization: "Bearer wrong" } })).status, 401);
    const pause = JSON.stringify({ topic: "signup-confirmation" });
    const crossSite = await w.call("/console/api/outboxes/mail/topics/pause", {
      method: "POST",
      body: pause,
      headers: { ...change, "sec-fetch-site": "cross-site", origin: "https://evil.example" },
    });
    assert.equal(crossSite.status, 403);
    const noHeader = await w.call("/console/api/outboxes/mail/topics/pause", { method: "POST", body: pause, headers: auth });
    assert.equal(noHeader.status, 403);
    assert.deepEqual((await w.api("outboxes/mail")).body.paused, []);
    const page = await w.call("/console/");
    assert.equal(page.status, 200);
    assert.match(page.headers.get("content-security-policy"), /frame-ancestors 'none'/);
  });

  it("reads no body before the credentials, and at most 64 KiB after, answering as the console", async () => {
    const chunk = new TextEncoder().encode("x".repeat(10_000));
    // 70,000 bytes, then a body that never ends: only an answer given
    // before the body is read comes back.
    const endless = () => {
      let sent = 0;
      return new ReadableStream({
        pull(controller) {
          if (sent < 7) {
            sent += 1;
            controller.enqueue(chunk);
          }
        },
      });
    };
    const anonymous = await w.call("/console/api/outboxes/mail/dead/replay", {
      method: "POST",
      body: endless(),
      duplex: "half",
      headers: { "content-type": "application/json", "x-outbox-console": "1" },
      signal: AbortSignal.timeout(10_000),
    });
    assert.equal(anonymous.status, 401);
    assert.equal((await anonymous.json()).error, "missing or wrong credentials");
    const viewer = await w.call("/console/api/outboxes/mail/dead/replay", {
      method: "POST",
      body: endless(),
      duplex: "half",
      headers: { ...change, authorization: "Bearer wrong" },
      signal: AbortSignal.timeout(10_000),
    });
    assert.equal(viewer.status, 401);
    const seventyK = () => {
      let sent = 0;
      return new ReadableStream({
        pull(controller) {
          if (sent === 7) return controller.close();
          sent += 1;
          controller.enqueue(chunk);
        },
      });
    };
    const refusals = [
      { body: "x".repeat(70_000) },
      { body: seventyK(), duplex: "half" },
      { body: endless(), duplex: "half" },
    ];
    for (const init of refusals) {
      const response = await w.call("/console/api/outboxes/mail/dead/replay", {
        method: "POST",
        headers: change,
        signal: AbortSignal.timeout(10_000),
        ...init,
      });
      assert.equal(response.status, 413);
      assert.deepEqual(await response.json(), { error: "the body is over 64 KiB" });
      assert.match(response.headers.get("content-security-policy"), /frame-ancestors 'none'/);
      assert.equal(response.headers.get("x-content-type-options"), "nosniff");
      assert.equal(response.headers.get("x-frame-options"), "DENY");
      assert.equal(response.headers.get("cache-control"), "no-store");
    }
    assert.equal((await w.api("session")).status, 200);
  });

  it("shows dead letters with the receiver's error, replays a group and pauses a topic", async () => {
    w.sink.status = 400;
    w.sink.refusal = HOSTILE_ERROR;
    for (const email of ["a@example.com", "b@example.com"]) assert.equal((await w.signup(email)).status, 201);
    await eventually(async () => (await w.api("outboxes/mail")).body.counts.dead.count === 2);
    const dead = (await w.api("outboxes/mail/messages?state=dead")).body.messages;
    assert.equal(dead.length, 2);
    assert.equal(dead[0].last_error, `receiver answered 400: ${HOSTILE_ERROR}`);
    const { groups } = (await w.api("outboxes/mail/dead/groups")).body;
    assert.deepEqual(
      groups.map((g) => [g.topic, g.error_class, g.count]),
      [["signup-confirmation", HOSTILE_CLASS, 2]],
    );

    w.sink.status = 202;
    const replay = await w.api("outboxes/mail/dead/replay", {
      method: "POST",
      headers: change,
      body: JSON.stringify({ topic: "signup-confirmation", error_class: HOSTILE_CLASS }),
    });
    assert.deepEqual(replay.body, { selected: 2, done: 2, more: false });
    await w.cron();
    const counts = (await w.api("outboxes/mail")).body.counts;
    assert.equal(counts.dead.count, 0);
    assert.equal(w.sink.delivered().length, 2);
    const rollups = (await w.api("outboxes/mail/rollups?minutes=60")).body;
    assert.equal(rollups.topics["signup-confirmation"].delivered, 2);
    assert.equal(rollups.topics["signup-confirmation"].dead, 2);

    const paused = await w.api("outboxes/mail/topics/pause", {
      method: "POST",
      headers: change,
      body: JSON.stringify({ topic: "signup-confirmation", reason: "mail API migrating" }),
    });
    assert.equal(paused.body.changed, true);
    assert.equal((await w.signup("c@example.com")).status, 201);
    await w.cron();
    assert.equal(w.sink.delivered().length, 2, "a paused topic is not delivered");
    assert.equal((await w.api("outboxes/mail")).body.counts.due.count, 1);
    await w.api("outboxes/mail/topics/resume", {
      method: "POST",
      headers: change,
      body: JSON.stringify({ topic: "signup-confirmation" }),
    });
    await w.cron();
    assert.equal(w.sink.delivered().length, 3);
  });
});

describe("the operator console, in a real browser", () => {
  let w;
  let browser;
  before(async () => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(`no browser at ${CHROMIUM}: run \`bash scripts/setup.sh\` (it installs Debian's chromium), or set CHROMIUM`);
    }
    w = await example();
    const { chromium } = await import("playwright-core");
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
    });
  });
  after(async () => {
    await browser?.close();
    await w?.mf.dispose();
  });

  it("shows, replays and pauses, and runs nothing a receiver or a payload wrote", async () => {
    w.sink.status = 400;
    w.sink.refusal = HOSTILE_ERROR;
    for (const email of ["grace@example.com", HOSTILE_EMAIL]) assert.equal((await w.signup(email)).status, 201);
    await eventually(async () => (await w.api("outboxes/mail")).body.counts.dead.count === 2);

    const page = await browser.newPage({ viewport: { width: 1280, height: 1400 } });
    const alerts = [];
    const pageErrors = [];
    page.on("pageerror", (error) => pageErrors.push(error.message));
    page.on("dialog", async (dialog) => {
      if (dialog.type() === "confirm") return dialog.accept();
      alerts.push(dialog.message());
      return dialog.dismiss();
    });
    await page.goto(new URL("/console/", w.url).href);
    await page.locator("#token").fill(TOKEN);
    await page.locator("#signin-form button").click();
    await page.locator('#counts [data-state="dead"] dd').filter({ hasText: "2" }).waitFor();

    // The receiver's error and the payload are text on the page, not markup.
    const errors = page.locator("#messages td.error");
    await errors.first().waitFor();
    assert.deepEqual(await errors.allTextContents(), [
      `receiver answered 400: ${HOSTILE_ERROR}`,
      `receiver answered 400: ${HOSTILE_ERROR}`,
    ]);
    assert.equal(await page.locator("#messages img, #messages script").count(), 0);
    assert.match((await page.locator("#messages pre").allTextContents()).join("\n"), /<script>alert\(1\)<\/script>@x\.example/);
    assert.equal(await page.locator("script").count(), 1, "only the console's own script");
    const shots = process.env.CONSOLE_SCREENSHOT;
    if (shots) await page.screenshot({ path: path.resolve(root, shots), fullPage: true });

    // Replay the group from the page: delivered by the next drain.
    w.sink.status = 202;
    await page.locator("#groups button", { hasText: "Replay group" }).click();
    await page.locator("#status").filter({ hasText: "replay: 2 done" }).waitFor();
    await w.cron();
    assert.equal(w.sink.delivered().length, 2);
    await page.locator("#refresh").selectOption("2");
    await page.locator('#counts [data-state="dead"] dd').filter({ hasText: /^0$/ }).waitFor();
    await page.locator('#topics tr[data-topic="signup-confirmation"] td:nth-child(3)').filter({ hasText: /^2$/ }).waitFor();

    // Pause the topic from the page: the next drain skips it.
    await page.locator("#pause-topic").fill("signup-confirmation");
    await page.locator("#pause-reason").fill("mail API migrating");
    await page.locator("#pause-form button").click();
    await page.locator('#topics tr[data-topic="signup-confirmation"] .paused').waitFor();
    assert.equal((await w.signup("ada@example.com")).status, 201);
    await w.cron();
    assert.equal(w.sink.delivered().length, 2, "the paused topic was not drained");
    await page.locator('#topics tr[data-topic="signup-confirmation"] button', { hasText: "Resume" }).click();
    await page.locator('#topics tr[data-topic="signup-confirmation"] button', { hasText: "Pause" }).waitFor();
    await w.cron();
    assert.equal(w.sink.delivered().length, 3);

    // Purge one selected dead letter from the list: it goes, and the list
    // shows the state after the action.
    w.sink.status = 400;
    assert.equal((await w.signup("purged@example.com")).status, 201);
    await page.locator('#counts [data-state="dead"] dd').filter({ hasText: /^1$/ }).waitFor();
    await page.locator("#messages tr", { hasText: "purged@example.com" }).locator("input[type=checkbox]").check();
    await page.locator("#purge-selected").click();
    await page.locator("#status").filter({ hasText: /purge: .*"done":1/ }).waitFor();
    await page.locator('#counts [data-state="dead"] dd').filter({ hasText: /^0$/ }).waitFor();
    // The list is read again after the counts: it empties a moment later.
    await page.waitForFunction(() => document.querySelectorAll("#messages tr").length === 0);

    // An account's data, exported and erased from the page: its messages,
    // its keys and the Worker's own rows, in one batch.
    const { account_id } = await (await w.signup("erase.me@example.com")).json();
    await page.locator("#inbox-count").filter({ hasText: /^inbox: \d+ keys processed$/ }).waitFor();
    await page.locator("#subject").fill(account_id);
    await page.locator("#subject-form button[type=submit]").click();
    await page.locator("#subject-summary").filter({ hasText: /1 message\(s\) in mail\b/ }).waitFor();
    assert.match(await page.locator("#subject-export").textContent(), /erase\.me@example\.com/);
    await page.locator("#erase-subject").click();
    await page.locator("#subject-summary").filter({ hasText: `${account_id} erased` }).waitFor();
    const erased = (await w.api(`subjects?subject=${account_id}`)).body;
    assert.deepEqual([erased.outboxes.mail, erased.application.account], [[], null]);
    assert.equal(typeof erased.erased_at_ms, "number");

    // From the console's own page: no credentials, 401; a change without
    // the console's header, 403.
    const refused = await page.evaluate(async () => {
      const noCredentials = await fetch("api/session");
      const noHeader = await fetch("api/outboxes/mail/topics/pause", {
        method: "POST",
        headers: { authorization: `Bearer ${sessionStorage.getItem("outbox-console-token")}`, "content-type": "application/json" },
        body: JSON.stringify({ topic: "signup-confirmation" }),
      });
      return [noCredentials.status, noHeader.status];
    });
    assert.deepEqual(refused, [401, 403]);
    // From a page of another site (localhost is not 127.0.0.1): the browser
    // marks the POST cross-site, and it changes nothing.
    const other = await browser.newPage();
    const otherSite = new URL(w.url.href);
    otherSite.hostname = "localhost";
    await other.goto(new URL("/elsewhere", otherSite).href);
    await other.evaluate(async (target) => {
      await fetch(target, { method: "POST", mode: "no-cors", body: JSON.stringify({ topic: "signup-confirmation" }) });
    }, new URL("/console/api/outboxes/mail/topics/pause", w.url).href);
    assert.deepEqual((await w.api("outboxes/mail")).body.paused, []);
    await other.close();
    assert.deepEqual(alerts, [], "no alert ran");
    assert.deepEqual(pageErrors, []);
    await page.close();
  });
});
