// The example Worker's bad-input catalogue: one test per case, each with
// its HTTP status and a database left exactly as it was. And the logs
// never carry the admin token or a person's address.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { eventually, start } from "./harness.mjs";
import { MailSink } from "./mail_sink.mjs";

const TOKEN = "catalogue-secret-token";
const admin = { authorization: `Bearer ${TOKEN}` };
const logs = [];
const sink = new MailSink();
let mf;

async function tables() {
  const db = await mf.getD1Database("DB");
  const rows = async (table) => (await db.prepare(`SELECT * FROM ${table} ORDER BY 1`).all()).results;
  return { accounts: await rows("accounts"), outbox: await rows("outbox"), inbox: await rows("inbox") };
}

const call = (path, init = {}) => mf.dispatchFetch(`http://example.test${path}`, init);
const post = (body, headers = {}) => call("/signup", { method: "POST", body, headers });

/** Runs `request`, expects `status`, and checks no table changed. */
async function refused(status, request) {
  const before = await tables();
  const response = await request();
  assert.equal(response.status, status, await response.clone().text());
  const body = await response.json();
  assert.equal(typeof body.error, "string", "a clear error message");
  assert.deepEqual(await tables(), before, "the database changed");
  return body;
}

describe("bad input to the example Worker", () => {
  before(async () => {
    mf = await start("examples/signup-mail", {
      bindings: { MAIL_API_URL: "https://mail.test/send", ADMIN_TOKEN: TOKEN },
      outboundService: sink.handler,
      onLog: (line) => logs.push(line),
    });
    // One account already, with a mail the API refuses: logs get errors.
    sink.status = 400;
    assert.equal((await post(JSON.stringify({ email: "existing@example.com" }))).status, 201);
    const db = await mf.getD1Database("DB");
    await eventually(async () => (await db.prepare("SELECT COUNT(*) AS n FROM outbox WHERE state = 'dead'").first()).n === 1);
  });
  after(() => mf.dispose());

  it("a body that is not JSON is 400", () => refused(400, () => post("{not json")));
  it("JSON without an email is 400", () => refused(400, () => post(JSON.stringify({ mail: "a@b.co" }))));
  it("an email that is not plausible is 400", () => refused(400, () => post(JSON.stringify({ email: "no-at-sign" }))));
  it("an oversized body is 413", () =>
    refused(413, () => post(JSON.stringify({ email: "a@b.co", pad: "x".repeat(20_000) }))));
  it("a second sign-up for an address is 409", () =>
    refused(409, () => post(JSON.stringify({ email: "EXISTING@example.com" }))));
  it("GET /signup is 405", () => refused(405, () => call("/signup")));
  it("an unknown route is 404", () => refused(404, () => call("/nowhere")));
  it("a console request without the admin token is 401 with a Bearer challenge", async () => {
    const response = await refused(401, () => call("/console/api/outboxes/mail"));
    assert.match(response.error, /credentials/);
    const challenged = await call("/console/api/session");
    assert.equal(challenged.headers.get("www-authenticate"), 'Bearer realm="outbox console"');
  });
  it("the Bearer scheme is taken in any case (RFC 9110)", async () => {
    for (const scheme of ["bearer", "BEARER", "bEaReR"]) {
      const response = await call("/console/api/outboxes/mail", { headers: { authorization: `${scheme} ${TOKEN}` } });
      assert.equal(response.status, 200, scheme);
    }
  });
  it("a wrong admin token is 401", () =>
    refused(401, () => call("/console/api/outboxes/mail", { headers: { authorization: "Bearer wrong" } })));
  it("a token without the Bearer scheme is 401", () =>
    refused(401, () => call("/console/api/outboxes/mail", { headers: { authorization: TOKEN } })));
  const change = (path, body) =>
    call(`/console/api/${path}`, {
      method: "POST",
      headers: { ...admin, "x-outbox-console": "1", "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  it("replaying an unknown id changes nothing", async () => {
    const before = await tables();
    const body = await (await change("outboxes/mail/dead/replay", { ids: ["01UNKNOWN"] })).json();
    assert.deepEqual(body, { selected: 1, done: 0, more: false });
    assert.deepEqual(await tables(), before);
  });
  it("an unknown outbox is 404", () => refused(404, () => call("/console/api/outboxes/nope", { headers: admin })));
  it("a replay without a selection is 400", () => refused(400, () => change("outboxes/mail/dead/replay", {})));
  it("an erasure without a subject is 400", () => refused(400, () => change("subjects/erase", { subject: "" })));
  it("a change without the console's header is 403", () =>
    refused(403, () => call("/console/api/subjects/erase", { method: "POST", headers: admin, body: '{"subject":"x"}' })));

  it("SQL text in an address is stored verbatim and harms nothing", async () => {
    const email = "x'); drop table accounts; --@example.com".replace(/ /g, "");
    const response = await post(JSON.stringify({ email }));
    assert.equal(response.status, 201);
    const db = await mf.getD1Database("DB");
    const row = await db.prepare("SELECT email FROM accounts WHERE email = ?").bind(email).first();
    assert.equal(row.email, email);
    const subject = encodeURIComponent("' OR 1=1 --");
    const exported = await (await call(`/console/api/subjects?subject=${subject}`, { headers: admin })).json();
    assert.deepEqual([exported.application.account, exported.outboxes.mail], [null, []]);
  });

  it("never logs the admin token or an address", async () => {
    await (await mf.getWorker()).scheduled({ cron: "*/1 * * * *" });
    await new Promise((resolve) => setTimeout(resolve, 200));
    const text = logs.join("");
    assert.match(text, /outbox drain of outbox \[/, "the drain reports were logged, naming their outbox");
    // As JSON objects, each count a field a log search can use.
    const drains = logs
      .join("\n")
      .split("\n")
      .filter((line) => line.includes('"event":"outbox.drain"'))
      .map((line) => JSON.parse(line.slice(line.indexOf("{"))));
    assert.ok(drains.length >= 1, "no JSON drain line was logged");
    assert.equal(drains.at(-1).outbox, "outbox");
    assert.equal(typeof drains.at(-1).claimed, "number");
    assert.ok(!text.includes(TOKEN), "the admin token was logged");
    assert.ok(!text.includes("existing@example.com"), "an address was logged");
  });
});
