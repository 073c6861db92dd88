// The example Worker end to end, in workerd with an in-memory D1: sign-up,
// immediate delivery through wait_until, cron drains, dead letters, and
// the operator console's API in place of hand-written admin routes.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import { readFileSync } from "node:fs";
import { Log, LogLevel } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { consoleChange, eventually, outboxCounts, root, start } from "./harness.mjs";
import { MailSink } from "./mail_sink.mjs";

const TOKEN = "test-admin-token";
// A key ring of the test's own.
const SEALING_KEYS = "dev-2026-12:+cAr37BR+FF7XWK/v9VFsD1GmmSh7S+oHQHj1kVoRwI=";
const HASH_KEY = "3WmyXSUN52tssMbSMupOLA1npbyxz7+UTRoM6wMCkPU=";
// The Queues as the example's wrangler.toml declares them.
const { queueProducers, queueConsumers } = unstable_getMiniflareWorkerOptions(path.join(root, "wrangler.toml")).workerOptions;
const admin = { authorization: `Bearer ${TOKEN}` };

// Miniflare's own log: where its send_email binding names each mail's .eml file.
class Captured extends Log {
  lines = [];
  logWithLevel(level, message) {
    this.lines.push(message);
  }
  /** The .eml files sent so far, in order. */
  mails() {
    return this.lines.flatMap((line) => [...line.matchAll(/(\/\S+\.eml)/g)].map((m) => m[1]));
  }
}

/**
 * The example Worker. By default its mail goes to an HTTP mail API (the
 * `MailSink`); `{ email }` sends it through a `send_email` binding instead
 * (`MAIL`, as wrangler.toml binds it), its files named in `captured`.
 */
async function example(settings = {}, { email } = {}) {
  const sink = new MailSink();
  const logs = [];
  const captured = new Captured(LogLevel.INFO);
  const mail = email ? {} : { MAIL_API_URL: "https://mail.test/send" };
  const mf = await start("examples/signup-mail", {
    onLog: (chunk) => logs.push(chunk),
    email,
    log: captured,
    bindings: {
      ...mail,
      ADMIN_TOKEN: TOKEN,
      BACKOFF_BASE_MS: "50",
      BACKOFF_CAP_MS: "100",
      ...settings,
    },
    outboundService: sink.handler,
    queueProducers,
    queueConsumers,
    // As wrangler.toml binds it: Miniflare accepts the writes and keeps none.
    analyticsEngineDatasets: { OUTBOX_ANALYTICS: { dataset: "workers_outbox" } },
  });
  const call = (path, init = {}) => mf.dispatchFetch(`http://example.test${path}`, init);
  const signup = (email) =>
    call("/signup", { method: "POST", body: JSON.stringify({ email }), headers: { "content-type": "application/json" } });
  const api = (path, init = {}) => call(`/console/api/${path}`, { ...init, headers: { ...admin, ...init.headers } });
  const change = (path, body) => consoleChange(mf, TOKEN, path, body);
  const stats = (outbox = "mail") => outboxCounts(mf, TOKEN, outbox);
  const welcomes = async () => (await (await mf.getD1Database("DB")).prepare("SELECT COUNT(*) AS n FROM welcomes").first()).n;
  const exported = async (subject) => (await api(`subjects?${new URLSearchParams({ subject })}`)).json();
  const erase = (subject) => change("subjects/erase", { subject });
  // The mail outbox's drain reports, as the Worker logged them (JSON lines).
  const drains = () =>
    logs
      .join("")
      .split("\n")
      .filter((line) => line.includes('"event":"outbox.drain"'))
      .map((line) => JSON.parse(line.slice(line.indexOf("{"))))
      .filter((report) => report.outbox === "outbox");
  const cron = async () => (await mf.getWorker()).scheduled({ cron: "*/1 * * * *" });
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  return { mf, sink, captured, call, api, change, signup, stats, welcomes, exported, erase, drains, cron, sleep };
}

describe("example Worker", () => {
  it("signs up and delivers the mail at once through wait_until", async () => {
    const { mf, sink, signup, stats } = await example();
    try {
      const response = await signup("Ada@Example.com");
      assert.equal(response.status, 201);
      const { account_id, outbox_id } = await response.json();
      await eventually(() => sink.delivered().length === 1);
      const [mail] = sink.mails;
      assert.equal(mail.id, outbox_id);
      assert.equal(mail.key, outbox_id, "Idempotency-Key is the outbox id");
      assert.equal(mail.to, "ada@example.com");
      assert.match(mail.text, new RegExp(account_id));
      await eventually(async () => (await stats()).pending === 0 && (await stats()).leased === 0);
    } finally {
      await mf.dispose();
    }
  });

  it("carries the sign-up's trace to the mail API and to the Queue consumer", async () => {
    const { mf, sink, call, exported } = await example();
    try {
      const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
      const traceparent = `00-${traceId}-00f067aa0ba902b7-01`;
      const traced = await call("/signup", {
        method: "POST",
        body: JSON.stringify({ email: "traced@example.com" }),
        headers: { "content-type": "application/json", traceparent, tracestate: "rojo=00f067aa0ba902b7" },
      });
      assert.equal(traced.status, 201);
      const { account_id } = await traced.json();
      // A malformed traceparent is ignored (W3C: a new trace), never forwarded.
      const malformed = await call("/signup", {
        method: "POST",
        body: JSON.stringify({ email: "untraced@example.com" }),
        headers: { "content-type": "application/json", traceparent: "00-not-a-trace" },
      });
      assert.equal(malformed.status, 201);
      await eventually(() => sink.delivered().length === 2);
      const byAddress = Object.fromEntries(sink.mails.map((mail) => [mail.to, mail]));
      assert.equal(byAddress["traced@example.com"].traceparent, traceparent);
      assert.equal(byAddress["untraced@example.com"].traceparent, null);
      // Through the account-events Queue to the consumer, which keeps the trace id.
      const welcome = await eventually(async () => (await exported(account_id)).application.welcome);
      assert.equal(welcome.trace_id, traceId);
    } finally {
      await mf.dispose();
    }
  });

  it("answers 409 to a second sign-up and sends one mail", async () => {
    const { mf, sink, signup, stats, cron } = await example();
    try {
      assert.equal((await signup("grace@example.com")).status, 201);
      assert.equal((await signup("GRACE@example.com")).status, 409);
      await eventually(() => sink.delivered().length === 1);
      await cron();
      assert.equal(sink.mails.length, 1);
      assert.equal((await stats()).pending, 0);
    } finally {
      await mf.dispose();
    }
  });

  it("keeps the mail while the mail API is down and delivers it on a later cron drain", async () => {
    const { mf, sink, signup, stats, cron, sleep } = await example();
    try {
      sink.status = 503;
      assert.equal((await signup("linus@example.com")).status, 201);
      await eventually(async () => sink.mails.length === 1 && (await stats()).pending === 1);
      sink.status = 202;
      await sleep(150); // past the retry's backoff
      await cron();
      assert.equal(sink.delivered().length, 1);
      assert.equal(sink.mails[0].id, sink.mails[1].id, "the same message, retried");
      assert.deepEqual(
        { pending: (await stats()).pending, dead: (await stats()).dead },
        { pending: 0, dead: 0 },
      );
    } finally {
      await mf.dispose();
    }
  });

  it("counts what happened in the outbox's rollups, written with the settles", async () => {
    const { mf, sink, api, signup, stats, cron, sleep } = await example();
    try {
      sink.status = 503;
      assert.equal((await signup("edsger@example.com")).status, 201);
      await eventually(async () => sink.mails.length === 1 && (await stats()).pending === 1);
      sink.status = 202;
      await sleep(150); // past the retry's backoff
      await cron();
      assert.equal(sink.delivered().length, 1);
      const read = await api("outboxes/mail/rollups?minutes=5");
      assert.equal(read.status, 200);
      const { topics } = await read.json();
      const mail = topics["signup-confirmation"];
      // A 503 is the API unavailable: deferred, no attempt spent.
      assert.deepEqual(
        { delivered: mail.delivered, deferred: mail.deferred, retried: mail.retried, dead: mail.dead },
        { delivered: 1, deferred: 1, retried: 0, dead: 0 },
      );
      assert.equal(mail.lateness.count, 1);
      assert.equal(mail.duration.count, 2, "both deliveries were timed");
      assert.equal(typeof mail.age.p99_ms, "number");
      const bad = await api("outboxes/mail/rollups?minutes=0");
      assert.equal(bad.status, 400);
    } finally {
      await mf.dispose();
    }
  });

  it("parks a mail the API rejects, and replays it", async () => {
    const { mf, sink, api, change, signup, stats, cron } = await example();
    try {
      sink.status = 400;
      assert.equal((await signup("barbara@example.com")).status, 201);
      await eventually(async () => (await stats()).dead === 1);
      const dead = (await (await api("outboxes/mail/messages?state=dead")).json()).messages;
      assert.equal(dead.length, 1);
      assert.match(dead[0].last_error, /receiver answered 400/);
      sink.status = 202;
      const unknown = await (await change("outboxes/mail/dead/replay", { ids: ["01NOSUCHID"] })).json();
      assert.equal(unknown.done, 0);
      const replay = await (await change("outboxes/mail/dead/replay", { ids: [dead[0].id] })).json();
      assert.equal(replay.done, 1);
      await cron();
      assert.equal(sink.delivered().length, 1);
      assert.equal((await stats()).dead, 0);
    } finally {
      await mf.dispose();
    }
  });

  it("stops a drain at its query budget and leaves the rest due", async () => {
    // The cron run gives the mail drain what the relay (100 queries, and 1 to
    // spare) leaves of DRAIN_MAX_QUERIES: 4.
    const { mf, sink, signup, stats, drains, cron, sleep } = await example({ DRAIN_BATCH_SIZE: "5", DRAIN_MAX_QUERIES: "105" });
    try {
      sink.status = 503;
      for (let n = 0; n < 30; n++) assert.equal((await signup(`user${n}@example.com`)).status, 201);
      await eventually(async () => sink.mails.length === 30 && (await stats()).pending === 30);
      sink.status = 202;
      await sleep(150);
      const before = drains().length;
      await cron();
      const [report] = await eventually(() => {
        const cronDrains = drains().slice(before).filter((r) => r.claimed > 0);
        return cronDrains.length > 0 && cronDrains;
      });
      assert.deepEqual(
        { stopped: report.stopped.reason, delivered: report.delivered, queries: report.queries },
        // Outcomes ride along with the next claim: 3 claims, the last settle.
        { stopped: "query_budget", delivered: 15, queries: 4 },
      );
      const after = await stats();
      assert.deepEqual({ due: after.due, leased: after.leased }, { due: 15, leased: 0 });
    } finally {
      await mf.dispose();
    }
  });

  it("never delivers a row to two overlapping drains while its lease is live", async () => {
    const { mf, sink, signup, stats, drains, cron, sleep } = await example({ DRAIN_BATCH_SIZE: "4" });
    try {
      sink.status = 503;
      for (let n = 0; n < 20; n++) await signup(`overlap${n}@example.com`);
      await eventually(async () => (await stats()).pending === 20);
      sink.status = 202;
      sink.delayMs = 30;
      await sleep(150);
      const before = drains().length;
      await Promise.all([cron(), cron(), cron()]);
      const ids = sink.delivered().map((mail) => mail.id);
      assert.equal(ids.length, 20);
      assert.equal(new Set(ids).size, 20, "no message was delivered twice");
      const reports = await eventually(() => {
        const cronDrains = drains().slice(before).filter((r) => r.claimed > 0);
        return cronDrains.reduce((sum, r) => sum + r.delivered, 0) === 20 && cronDrains;
      });
      assert.ok(reports.length >= 2, `the cron runs overlapped: ${reports.length} drains claimed`);
      assert.equal(reports.reduce((sum, r) => sum + r.lease_lost, 0), 0);
    } finally {
      await mf.dispose();
    }
  });

  it("exports and erases everything about an account", async () => {
    const { mf, sink, signup, welcomes, exported, erase } = await example();
    try {
      sink.status = 400;
      const { account_id } = await (await signup("erase.me@example.com")).json();
      await signup("keep.me@example.com");
      await eventually(() => sink.mails.length === 2);
      // Both accounts' events reached the Queue and their welcome rows.
      await eventually(async () => (await welcomes()) === 2);
      const before = await exported(account_id);
      assert.equal(before.application.account.email, "erase.me@example.com");
      assert.equal(before.outboxes.mail.length, 1);
      assert.equal(before.outboxes.mail[0].state, "dead");
      assert.equal(before.outboxes.mail[0].payload, null, "payloads stay hidden unless the console shows them");
      const erased = await (await erase(account_id)).json();
      assert.deepEqual(erased, {
        outboxes: { mail: 1, "account-events": 0 },
        inboxes: { inbox: 1 },
        application: { accounts: 1, welcomes: 1 },
      });
      const after = await exported(account_id);
      assert.deepEqual(
        { account: after.application.account, outbox: after.outboxes.mail, inbox: after.inboxes.inbox },
        { account: null, outbox: [], inbox: [] },
      );
      const db = await mf.getD1Database("DB");
      const left = await db.prepare("SELECT COUNT(*) AS n FROM outbox WHERE subject = ?").bind(account_id).first();
      assert.equal(left.n, 0);
      const others = await db.prepare("SELECT COUNT(*) AS n FROM accounts").first();
      assert.equal(others.n, 1);
      const welcomeRows = await db.prepare("SELECT account_id FROM welcomes").all();
      assert.equal(welcomeRows.results.length, 1);
      assert.notEqual(welcomeRows.results[0].account_id, account_id);
    } finally {
      await mf.dispose();
    }
  });

  it("seals sign-up mails at rest, delivers them clear, and an erasure leaves a copy that nothing opens", async () => {
    // Keys of the test's own (`npm run dev` puts random ones into .dev.vars).
    const { mf, sink, signup, exported, erase } = await example({ OUTBOX_SEALING_KEYS: SEALING_KEYS, OUTBOX_HASH_KEY: HASH_KEY });
    try {
      sink.status = 400;
      const { account_id } = await (await signup("sealed.one@example.com")).json();
      await eventually(() => sink.mails.length === 1);
      assert.match(JSON.stringify(sink.mails[0]), /sealed\.one@example\.com/, "the receiver gets the mail clear");
      const db = await mf.getD1Database("DB");
      const rows = (await db.prepare("SELECT id, payload, subject, dedup_key FROM outbox").all()).results;
      assert.equal(rows.length, 1, "the refused mail is a dead letter");
      const [row] = rows;
      assert.match(row.payload, /^sealed:1:d:/);
      assert.doesNotMatch(row.payload, /sealed\.one|example\.com/);
      assert.match(row.subject, /^h1:/, "the subject is stored as a keyed hash");
      assert.match(row.dedup_key, /^h1:/, "the dedup key (the address) is stored as a keyed hash");
      assert.notEqual(row.subject, account_id);
      // The mail's data key (the id its sealed payload names), and the account.created event's
      // (published to endpoints): both of the account's hash.
      const keys = (await db.prepare("SELECT id, subject FROM outbox_keys ORDER BY id").all()).results;
      assert.deepEqual(keys.map((key) => key.subject), [row.subject, row.subject]);
      assert.ok(keys.some((key) => key.id === row.payload.slice("sealed:1:d:".length, "sealed:1:d:".length + 26)));
      // The export finds it by the account id and names it so.
      const before = await exported(account_id);
      assert.equal(before.outboxes.mail.length, 1);
      assert.equal(before.outboxes.mail[0].subject, account_id);

      const erased = await (await erase(account_id)).json();
      assert.equal(erased.outboxes.mail, 1);
      const left = (await db.prepare("SELECT COUNT(*) AS n FROM outbox_keys").first()).n;
      assert.equal(left, 0, "the erasure deleted the data key: a backup's copy of the payload opens no more");
      const tombstones = (await db.prepare("SELECT subject FROM erased_subjects").all()).results;
      assert.deepEqual(tombstones, [{ subject: row.subject }], "the tombstone names nobody");
      // The export reads when it was erased through the hashed tombstone.
      const refused = await exported(account_id);
      assert.equal(typeof refused.erased_at_ms, "number");
    } finally {
      await mf.dispose();
    }
  });

  it("erases an account right after sign-up, and the event still in flight brings nothing back", async () => {
    const { mf, signup, welcomes, exported, erase } = await example();
    try {
      // The sign-up relays its account.created event into the Queue at once; the erasure
      // commits before the consumer's batch (max_batch_timeout = 1 s) applies it.
      const { account_id } = await (await signup("gone@example.com")).json();
      const erased = await erase(account_id);
      assert.equal(erased.status, 200);
      // A second account's event follows it through the same Queue: once its welcome is
      // written, the erased account's event was consumed too.
      const { account_id: kept } = await (await signup("kept@example.com")).json();
      await eventually(async () => (await welcomes()) === 1, { timeoutMs: 10_000 });
      const db = await mf.getD1Database("DB");
      const welcomeRows = await db.prepare("SELECT account_id FROM welcomes").all();
      assert.deepEqual(welcomeRows.results.map((row) => row.account_id), [kept]);
      const after = await exported(account_id);
      assert.deepEqual(
        {
          account: after.application.account,
          outbox: after.outboxes.mail,
          inbox: after.inboxes.inbox,
          events: after.outboxes["account-events"],
          welcome: after.application.welcome,
        },
        { account: null, outbox: [], inbox: [], events: [], welcome: null },
      );
      assert.equal(typeof after.erased_at_ms, "number", "the export says when the account was erased");
      for (const table of ["outbox", "account_events", "inbox"]) {
        const left = await db.prepare(`SELECT COUNT(*) AS n FROM ${table} WHERE subject = ?`).bind(account_id).first();
        assert.equal(left.n, 0, `${table} still carries the erased account`);
      }
      // What the erasure keeps: the account's id, in its tombstone.
      const tombstone = await db.prepare("SELECT subject FROM erased_subjects").all();
      assert.deepEqual(tombstone.results, [{ subject: account_id }]);
    } finally {
      await mf.dispose();
    }
  });

  it("relays account.created through the Queue and writes each welcome once", async () => {
    const { mf, signup, stats, welcomes, cron } = await example();
    try {
      const ids = [];
      for (let n = 0; n < 30; n++) ids.push((await (await signup(`event${n}@example.com`)).json()).account_id);
      await eventually(async () => (await welcomes()) === 30, { timeoutMs: 10_000 });
      // A cron run relays nothing twice; the welcomes stay one per account.
      await cron();
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      assert.equal(await welcomes(), 30);
      const events = await stats("account-events");
      assert.equal(events.pending + events.leased, 0);
      const db = await mf.getD1Database("DB");
      const rows = (await db.prepare("SELECT account_id FROM welcomes ORDER BY account_id").all()).results;
      assert.deepEqual(rows.map((r) => r.account_id), [...ids].sort());
    } finally {
      await mf.dispose();
    }
  });

  it("fans a large mail backlog out to drains requested through a Queue", async () => {
    // A drain takes at most 40 mails, so one drain could not deliver them all.
    const { mf, sink, signup, stats, cron } = await example({ FANOUT_MESSAGES_PER_DRAIN: "40", DRAIN_MAX_MESSAGES: "40" });
    try {
      sink.status = 503;
      for (let n = 0; n < 150; n++) await signup(`backlog${n}@example.com`);
      await eventually(async () => (await stats()).due === 150, { timeoutMs: 10_000 });
      sink.status = 202;
      // The cron run asks for 4 drains (150 due, 40 each) and drains nothing itself.
      await cron();
      await eventually(async () => (await stats()).pending === 0 && (await stats()).leased === 0, { timeoutMs: 20_000 });
      const keys = sink.delivered().map((mail) => mail.key);
      assert.equal(keys.length, 150);
      assert.equal(new Set(keys).size, 150, "no mail delivered twice");
    } finally {
      await mf.dispose();
    }
  });
});

describe("example Worker, its mail through Cloudflare Email (send_email)", () => {
  it("sends the confirmation through the MAIL binding, its Message-ID the outbox id", async () => {
    const { mf, captured, signup, stats } = await example({}, { email: { send_email: [{ name: "MAIL" }] } });
    try {
      const response = await signup("ada@example.com");
      assert.equal(response.status, 201);
      const { account_id, outbox_id } = await response.json();
      const [file] = await eventually(() => captured.mails().length === 1 && captured.mails());
      const eml = readFileSync(file, "utf8");
      assert.match(eml, new RegExp(`^Message-ID: <${outbox_id}@workers-outbox\\.example>`, "m"));
      assert.match(eml, /^From: "workers-outbox example" <accounts@workers-outbox\.example>/m);
      assert.match(eml, /^To: <ada@example\.com>/m);
      assert.match(eml, /^Subject: Confirm your account/m);
      assert.match(eml, new RegExp(account_id));
      await eventually(async () => (await stats()).pending === 0 && (await stats()).leased === 0);
    } finally {
      await mf.dispose();
    }
  });

  it("parks a mail to a recipient the binding refuses as dead, with the binding's words", async () => {
    const refusing = { send_email: [{ name: "MAIL", allowed_destination_addresses: ["ada@example.com"] }] };
    const { mf, captured, signup, stats, api } = await example({}, { email: refusing });
    try {
      assert.equal((await signup("bob@example.com")).status, 201);
      await eventually(async () => (await stats()).dead === 1);
      const [dead] = (await (await api("outboxes/mail/messages?state=dead")).json()).messages;
      assert.match(dead.last_error, /send_email refused the mail: email to bob@example\.com not allowed/);
      assert.equal(captured.mails().length, 0, "no mail was sent");
    } finally {
      await mf.dispose();
    }
  });
});
