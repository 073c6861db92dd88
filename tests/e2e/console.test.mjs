// The operator console the example Worker mounts at /console/, in workerd:
// its JSON API from Node, and its page in a real browser (Debian's Chromium
// driven by playwright-core) — dead letters with the receiver's error,
// replay, the pause switch, a subject's export and erasure, text that must
// stay text, refused requests.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import { eventually, launchChromium, root, start } from "./harness.mjs";
import { MailSink } from "./mail_sink.mjs";

const TOKEN = "test-console-token";
const HOSTILE_ERROR = "<img src=x onerror=alert(1)>";
// Its class: the status and the start of the answer, digits as `#`.
const HOSTILE_CLASS = "receiver answered 400: <img src=x onerror=alert(#)>";
const HOSTILE_EMAIL = "<script>alert(1)</script>@x.example";
const auth = { authorization: `Bearer ${TOKEN}` };
const change = { ...auth, "content-type": "application/json", "x-outbox-console": "1" };

async function example() {
  const sink = new MailSink();
  const mf = await start("examples/signup-mail", {
    bindings: {
      MAIL_API_URL: "https://mail.test/send",
      ADMIN_TOKEN: TOKEN,
      PORTAL_KEY: "portal-key-for-the-tests-0123456789",
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
    const wrongToken = await w.call("/console/api/outboxes/mail/dead/replay", {
      method: "POST",
      body: endless(),
      duplex: "half",
      headers: { ...change, authorization: "Bearer wrong" },
      signal: AbortSignal.timeout(10_000),
    });
    assert.equal(wrongToken.status, 401);
    const crossSite = await w.call("/console/api/outboxes/mail/dead/replay", {
      method: "POST",
      body: endless(),
      duplex: "half",
      headers: { ...change, "sec-fetch-site": "cross-site", origin: "https://evil.example" },
      signal: AbortSignal.timeout(10_000),
    });
    assert.equal(crossSite.status, 403, "an operator's token from another site is refused unread");
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
    w = await example();
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await w?.mf.dispose();
  });

  it("loads quietly, opens a message's detail, isolates hidden characters, and keeps its session in a new tab", async (t) => {
    // An example of its own: its charts start empty, and what it delivers is its own.
    const x = await example();
    // Disposed even when the test fails: a live Miniflare would keep the run from ending.
    t.after(() => x.mf.dispose());
    const context = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
    const page = await context.newPage();
    const noise = [];
    page.on("console", (message) => ["error", "warning"].includes(message.type()) && noise.push(message.text()));
    page.on("response", (response) => response.status() >= 400 && noise.push(`${response.status()} ${response.url()}`));
    page.on("pageerror", (error) => noise.push(error.message));
    const dialogs = [];
    page.on("dialog", async (dialog) => {
      dialogs.push(dialog.message());
      // Bulk actions are confirmed; a pause of an unseen topic is not.
      return dialog.message().includes("all the same") ? dialog.dismiss() : dialog.accept();
    });
    await page.goto(new URL("/console/", x.url).href);
    await page.locator("#signin-form").waitFor();
    await page.locator("#token").fill(TOKEN);
    await page.locator("#signin-form button").click();
    await page.locator('#counts [data-state="dead"] dd').waitFor();
    // Nothing delivered yet: each chart says so.
    await page.locator("#chart-delivered + .y-max + .empty").filter({ hasText: "nothing delivered in this window" }).waitFor();
    assert.equal(await page.locator("#chart-failures + .y-max + .empty").isVisible(), true);
    await page.locator("#utc").check();
    await page.locator("#updated").filter({ hasText: / UTC$/ }).waitFor();

    // A receiver's answer with a right-to-left override and a long tail.
    const answer = `\u202Eevil\u202C says no ${"x".repeat(600)}`;
    x.sink.status = 400;
    x.sink.refusal = answer;
    assert.equal((await x.signup("detail@example.com")).status, 201);
    await page.locator("#refresh-now").click();
    const row = page.locator("#messages tr").first();
    await row.locator("td.error .ctl").first().waitFor();
    assert.deepEqual(await row.locator("td.error .ctl").allTextContents(), ["U+202E", "U+202C"]);
    assert.ok(!(await row.locator("td.error").textContent()).includes("\u202E"), "the override itself is not in the page");
    const height = (await row.boundingBox()).height;
    assert.ok(height < 60, `a row with a 600-letter error is one line (${height} px)`);
    await page.locator("#chart-failures + .y-max").filter({ hasText: /^1$/ }).waitFor();
    assert.match(await page.locator("#chart-failures rect title").first().textContent(), /UTC: 1$/);
    assert.match(await page.locator(".x-axis .from").first().textContent(), / UTC$/);

    await row.locator("button.link").click();
    await page.locator("#detail").waitFor();
    const field = (name) => page.locator(`#detail-fields dd[data-field="${name}"]`);
    assert.equal(await field("state").textContent(), "dead");
    assert.match(await field("last error").textContent(), /^receiver answered 400: U\+202EevilU\+202C says no x{100,}$/);
    assert.match(await field("died").textContent(), / UTC$/);
    assert.match(await page.locator("#detail-payload").textContent(), /\n  "to": "detail@example\.com"/, "pretty JSON");
    const attempt = page.locator("#detail-attempts tr").first();
    assert.equal(await attempt.locator("td").nth(2).textContent(), "400");
    assert.match(await attempt.locator("td").nth(6).textContent(), /^U\+202Eevil/);
    assert.match(page.url(), /#message=mail\/\d+\./);
    const shots = process.env.CONSOLE_SCREENSHOTS;
    if (shots) await page.locator("#detail").screenshot({ path: path.resolve(root, shots, "console-detail.png") });

    // A new tab is signed in, and opens the message its address names.
    const tab = await context.newPage();
    await tab.goto(page.url());
    await tab.locator('#detail-fields dd[data-field="state"]').filter({ hasText: "dead" }).waitFor();
    assert.equal(await tab.locator("#signin").isVisible(), false);
    if (shots) {
      await tab.setViewportSize({ width: 390, height: 844 });
      await tab.evaluate(() => window.scrollTo(0, 0));
      await tab.screenshot({ path: path.resolve(root, shots, "console-phone.png") });
    }

    assert.deepEqual(noise, [], "no error, warning or failed request on the way");

    // Every dead letter of one error class, counted, confirmed by its count and replayed.
    x.sink.refusal = "no such mailbox 123";
    for (const email of ["bulk1@example.com", "bulk2@example.com"]) assert.equal((await x.signup(email)).status, 201);
    await eventually(async () => (await x.api("outboxes/mail")).body.counts.dead.count === 3);
    await page.locator("#b-class").fill("receiver answered 400: no such mailbox #");
    await page.locator("#bulk-form button[type=submit]").click();
    await page.locator("#bulk-note").filter({ hasText: "2 dead letter(s) match" }).waitFor();
    await page.locator("#bulk-replay").click();
    await page.locator("#status").filter({ hasText: "replay: 2 done" }).waitFor();
    assert.match(dialogs.at(-1), /^replay 2 dead letter\(s\) of mail matching error class \u2068receiver answered 400: no such mailbox #\u2069, died by \u2068.* UTC\u2069\?$/);
    // A count of one outbox is not acted on in another.
    await page.locator("#bulk-form button[type=submit]").click();
    await page.locator("#bulk-note").filter({ hasText: /^0 dead letter/ }).waitFor();
    await page.locator("#b-class").fill("");
    await page.locator("#bulk-form button[type=submit]").click();
    await page.locator("#bulk-note").filter({ hasText: "1 dead letter(s) match" }).waitFor();
    assert.equal(await page.locator("#bulk-purge").isDisabled(), false);
    await page.locator("#outboxes button", { hasText: "account-events" }).click();
    await page.waitForFunction(() => document.getElementById("bulk-note").textContent === "");
    assert.equal(await page.locator("#bulk-purge").isDisabled(), true);
    await page.locator("#outboxes button", { hasText: /^mail$/ }).click();
    const stillDead = (await x.api("outboxes/mail/messages?state=dead")).body.messages;
    assert.deepEqual(stillDead.map((m) => JSON.parse(m.payload).to), ["detail@example.com"]);

    // A topic the outbox has not seen is paused only when the operator says so.
    await page.locator("#pause-topic").fill("signup-confirmaton");
    await page.locator("#pause-form button").click();
    await page.locator("#status").filter({ hasText: "pause of signup-confirmaton not sent" }).waitFor();
    assert.match(dialogs.at(-1), /no message settled in the last hour/);
    // One it has seen is paused, and its held messages say so.
    await page.locator("#pause-topic").fill("signup-confirmation");
    await page.locator("#pause-reason").fill("provider migrating");
    await page.locator("#pause-form button").click();
    await page.locator("#status").filter({ hasText: "signup-confirmation: paused" }).waitFor();
    await page.locator("#oldest").filter({ hasText: "paused, their messages held: signup-confirmation" }).waitFor();
    assert.equal((await x.signup("held@example.com")).status, 201);
    await page.locator("#state").selectOption("due");
    await page.locator("#filter button").click();
    await page.locator("#messages td.paused").filter({ hasText: "paused: provider migrating" }).first().waitFor();
    await x.api("outboxes/mail/topics/resume", {
      method: "POST",
      headers: change,
      body: JSON.stringify({ topic: "signup-confirmation" }),
    });

    // Signing out in one tab signs the other out too.
    await page.locator("#signout").click();
    await page.locator("#signin").waitFor();
    await tab.locator("#signin").waitFor();
    await context.close();
  });

  it("lists endpoints, opens one with its attempts, and disables, enables, tests, recovers and rotates it", async (t) => {
    const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const url = "https://hooks.test/T0/B0/url-token";
    // An example of its own: its endpoint receives the account events of no other test.
    const w = await example();
    t.after(() => w.mf.dispose());
    const created = await w.call("/admin/endpoints", {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ url, secret, event_types: ["account.created"] }),
    });
    assert.equal(created.status, 201);
    const { id } = await created.json();

    const page = await browser.newPage({ viewport: { width: 1280, height: 1400 } });
    const pageErrors = [];
    page.on("pageerror", (error) => pageErrors.push(error.message));
    // Confirmations are accepted; a reason is given.
    page.on("dialog", (dialog) => dialog.accept(dialog.type() === "prompt" ? "receiver moving" : undefined));
    await page.goto(new URL("/console/", w.url).href);
    await page.locator("#token").fill(TOKEN);
    await page.locator("#signin-form button").click();
    const row = page.locator(`#endpoints tr[data-endpoint="${id}"]`);
    await row.waitFor();
    // This example shows payloads, so the whole URL; never the secret.
    assert.deepEqual((await row.locator("td").allTextContents()).slice(1, 4), ["app", url, "enabled"]);
    assert.equal((await page.content()).includes("whsec_"), false);

    await row.locator("button.link").click();
    await page.locator('#endpoint-fields [data-field="state"]').filter({ hasText: "enabled" }).waitFor();
    await page.locator("#ep-disable").click();
    await page.locator("#status").filter({ hasText: `${id}: disabled` }).waitFor();
    await row.locator("td", { hasText: "disabled: receiver moving" }).waitFor();
    await page.locator("#ep-test").click();
    await page.locator("#status").filter({ hasText: "test failed:" }).waitFor();
    await page.locator("#ep-enable").click();
    await page.locator("#status").filter({ hasText: `${id}: enabled` }).waitFor();

    // A test event the receiver refuses shows in the endpoint's attempts.
    w.sink.status = 503;
    w.sink.refusal = "down for maintenance";
    await page.locator("#ep-test").click();
    await page.locator("#status").filter({ hasText: "sent a test event" }).waitFor();
    await w.cron();
    const tested = w.sink.mails.filter((mail) => mail.url === url);
    assert.equal(tested.length, 1);
    assert.equal(tested[0].type, "outbox.endpoint.test");
    await row.locator("button.link").click();
    const attempt = page.locator("#endpoint-attempts tr").first();
    await attempt.waitFor();
    const cells = await attempt.locator("td").allTextContents();
    assert.equal(cells[3], "503");
    assert.equal(cells[7], "down for maintenance");
    w.sink.status = 202;

    // Its events since a time are given to it again; none were published.
    await page.locator("#ep-since").fill("2020-01-01T00:00");
    await page.locator("#ep-recover button").click();
    await page.locator("#status").filter({ hasText: `${id}: 0 event(s) to send again` }).waitFor();

    // A rotation: the new secret is shown once, the old one's end beside it.
    await page.locator("#ep-rotate button").click();
    await page.locator("#ep-secret").waitFor();
    const rotated = await page.locator("#ep-secret-value").textContent();
    assert.match(rotated, /^whsec_[A-Za-z0-9+/]{43}=$/);
    await page.locator('#endpoint-fields [data-field="previous secret"]').filter({ hasText: "signs until" }).waitFor();
    // Every change is in the audit log; the new secret is not.
    await page.locator("#audit tr", { hasText: "outboxes/mail/endpoint/rotate" }).waitFor();
    const audited = await page.locator("#audit td:nth-child(4)").allTextContents();
    for (const action of ["disable", "enable", "test", "recover", "rotate"]) {
      assert.ok(audited.includes(`outboxes/mail/endpoint/${action}`), `${action} in ${audited}`);
    }
    assert.equal((await page.locator("#audit").textContent()).includes("whsec_"), false);
    const shots = process.env.CONSOLE_SCREENSHOTS;
    if (shots) await page.locator("#endpoint").screenshot({ path: path.resolve(root, shots, "console-endpoint.png") });
    assert.deepEqual(pageErrors, []);
    await page.close();
  });

  it("gives a tenant its own endpoints and deliveries through a portal link, and nothing else", async (t) => {
    const w = await example();
    t.after(() => w.mf.dispose());
    const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const url = "https://hooks.test/app/receiver";
    const created = await w.call("/admin/endpoints", {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ url, secret, event_types: ["account.created"] }),
    });
    const { id } = await created.json();
    // A sign-up's event to it dies at the receiver.
    w.sink.status = (body) => (body.type === "account.created" || body.account_id ? 400 : 202);
    w.sink.refusal = "unknown account";
    assert.equal((await w.signup("portal@example.com")).status, 201);
    await w.cron();
    const link = async (owner) => (await (await w.call(`/admin/portal-link?owner=${owner}`, { headers: auth })).json()).link;
    assert.equal((await w.call("/admin/portal-link?owner=app")).status, 401, "minted for operators only");

    const page = await browser.newPage({ viewport: { width: 1280, height: 1400 } });
    const pageErrors = [];
    page.on("pageerror", (error) => pageErrors.push(error.message));
    page.on("dialog", (dialog) => dialog.accept());
    await page.goto(new URL(await link("app"), w.url).href);
    // The token leaves the address; only the endpoints show.
    await page.locator(`#endpoints tr[data-endpoint="${id}"]`).waitFor();
    assert.equal(new URL(page.url()).hash, "");
    assert.equal(await page.locator("#endpoints-note").textContent(), "1 endpoint(s).");
    assert.match(await page.locator("#role").textContent(), /^app's endpoints · this link works until /);
    for (const staff of ["#counts", "#topics", "#groups", "#messages", "#subject", "#audit", "#e-owner"]) {
      assert.equal(await page.locator(staff).isVisible(), false, `${staff} is shown to a tenant`);
    }
    await page.locator(`#endpoints tr[data-endpoint="${id}"] button.link`).click();
    await page.locator('#endpoint-fields [data-field="URL"]').filter({ hasText: url }).waitFor();
    const dead = page.locator("#endpoint-deliveries tr");
    await dead.first().waitFor();
    assert.equal((await dead.first().locator("td").allTextContents())[2], "receiver answered 400: unknown account");

    // It replays its dead delivery and rotates its secret.
    w.sink.status = 202;
    await page.locator("#ep-replay").click();
    await page.locator("#status").filter({ hasText: `${id}: 1 dead delivery replayed` }).waitFor();
    await page.locator("#deliveries-note").filter({ hasText: "No dead delivery found." }).waitFor();
    await page.locator("#ep-rotate button").click();
    await page.locator("#ep-secret").waitFor();
    const shots = process.env.CONSOLE_SCREENSHOTS;
    if (shots) await page.screenshot({ path: path.resolve(root, shots, "console-portal.png"), fullPage: true });

    // From the portal's page, nothing of the operator's console answers.
    const token = await page.evaluate(() => sessionStorage.getItem(`outbox-portal-token:${new URL("api/", document.baseURI).pathname}`));
    const refused = await page.evaluate(async (token) => {
      const headers = { "x-outbox-portal": token, "content-type": "application/json", "x-outbox-console": "1" };
      const statuses = [];
      for (const path of ["outboxes/mail", "outboxes/mail/messages?state=dead", "outboxes/mail/audit", "subjects?subject=x"]) {
        statuses.push((await fetch(`api/${path}`, { headers })).status);
      }
      const pause = await fetch("api/outboxes/mail/topics/pause", { method: "POST", headers, body: JSON.stringify({ topic: "signup-confirmation", unseen: true }) });
      statuses.push(pause.status);
      return statuses;
    }, token);
    assert.deepEqual(refused, [403, 403, 403, 403, 403]);

    // Another owner's link sees none of app's endpoints, by list or by id.
    const other = await browser.newPage();
    await other.goto(new URL(await link("globex"), w.url).href);
    await other.locator("#endpoints-note").filter({ hasText: "You have no endpoint yet." }).waitFor();
    const crossed = await other.evaluate(async (id) => {
      const token = sessionStorage.getItem(`outbox-portal-token:${new URL("api/", document.baseURI).pathname}`);
      const headers = { "x-outbox-portal": token, "content-type": "application/json", "x-outbox-console": "1" };
      return [
        (await fetch(`api/outboxes/mail/endpoint?id=${id}`, { headers })).status,
        (await fetch(`api/outboxes/mail/endpoint?owner=app&id=${id}`, { headers })).status,
        (await fetch(`api/outboxes/mail/deliveries?endpoint=${id}`, { headers })).status,
        (await fetch("api/outboxes/mail/endpoint/disable", { method: "POST", headers, body: JSON.stringify({ owner: "app", id }) })).status,
      ];
    }, id);
    assert.deepEqual(crossed, [404, 404, 404, 404]);
    const still = (await w.api(`outboxes/mail/endpoint?owner=app&id=${id}`)).body.endpoint;
    assert.equal(still.state, "enabled");
    // An altered link grants nothing, and says so.
    await other.goto(new URL((await link("app")).replace("#portal=", "#portal=x"), w.url).href);
    await other.locator("#signin-why").filter({ hasText: "This link has expired or is not valid" }).waitFor();
    assert.equal(await other.locator("#signin-form").isVisible(), false);
    assert.deepEqual(pageErrors, []);
    await other.close();
    await page.close();
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
    const listed = (await w.api("outboxes/mail/messages?state=dead")).body.messages;
    const hostile = listed.find((message) => message.payload.includes(HOSTILE_EMAIL));
    await page.locator(`#messages tr[data-id="${hostile.id}"] button.link`).click();
    await page.locator("#detail").waitFor();
    await page.locator("#detail-payload").filter({ hasText: "<script>alert(1)</script>@x.example" }).waitFor();
    assert.equal(await page.locator("#detail img, #detail script").count(), 0);
    assert.equal(await page.locator("script").count(), 1, "only the console's own script");
    await page.locator("#detail-close").click();
    const shots = process.env.CONSOLE_SCREENSHOTS;
    if (shots) await page.screenshot({ path: path.resolve(root, shots, "console.png"), fullPage: true });

    // Replay the group from the page: delivered by the next drain.
    w.sink.status = 202;
    await page.locator("#groups button", { hasText: "Replay group" }).click();
    await page.locator("#status").filter({ hasText: "replay: 2 done" }).waitFor();
    // The audit log names who replayed what, and what it did.
    const replayed = page.locator("#audit tr", { hasText: "outboxes/mail/dead/replay" });
    await replayed.waitFor();
    const [, who, role, , selection, result] = await replayed.locator("td").allTextContents();
    assert.deepEqual([who, role], ["ADMIN_TOKEN", "operator"]);
    assert.match(selection, /"error_class":/);
    assert.match(result, /"done":2/);
    await w.cron();
    assert.equal(w.sink.delivered().length, 2);
    await page.locator("#refresh-now").click();
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
    // The live numbers: every 10 s the page reads the messages due now, the
    // paused topics and the charts' last two minutes, and nothing else.
    const requested = [];
    page.on("request", (request) => {
      const url = new URL(request.url());
      if (url.pathname.includes("/api/")) requested.push(`${url.pathname.split("/api/")[1]}${url.search}`);
    });
    await page.locator("#refresh").selectOption("10");
    await page.locator('#counts [data-state="due"] dd').filter({ hasText: /^1$/ }).waitFor({ timeout: 15_000 });
    await page.locator("#oldest").filter({ hasText: "due counted live" }).waitFor();
    assert.deepEqual([...new Set(requested)].sort(), ["outboxes/mail/live", "outboxes/mail/rollups?minutes=2"]);
    await page.locator("#refresh").selectOption("0");
    await page.locator('#topics tr[data-topic="signup-confirmation"] button', { hasText: "Resume" }).click();
    await page.locator('#topics tr[data-topic="signup-confirmation"] button', { hasText: "Pause" }).waitFor();
    await w.cron();
    assert.equal(w.sink.delivered().length, 3);

    // Purge one selected dead letter from the list: it goes, and the list
    // shows the state after the action.
    w.sink.status = 400;
    assert.equal((await w.signup("purged@example.com")).status, 201);
    // The live numbers count the due messages only: the states are counted again on request.
    await page.locator("#refresh-now").click();
    await page.locator('#counts [data-state="dead"] dd').filter({ hasText: /^1$/ }).waitFor();
    const [purged] = (await w.api("outboxes/mail/messages?state=dead")).body.messages;
    assert.match(purged.payload, /purged@example\.com/);
    await page.locator(`#messages tr[data-id="${purged.id}"] input[type=checkbox]`).check();
    await page.locator("#purge-selected").click();
    await page.locator("#status").filter({ hasText: "purge: 1 of 1 selected done" }).waitFor();
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
        headers: {
          authorization: `Bearer ${localStorage.getItem(`outbox-console-token:${new URL("api/", document.baseURI).pathname}`)}`,
          "content-type": "application/json",
        },
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
