// The platform's own destinations with Miniflare's real bindings: mail
// through `send_email`, a second Worker over a service binding, instances of
// a Workflow, and a Queue; each as a deliverer (its verdicts, and a retry
// after a lost reply) and as an endpoint kind in one fan-out. Failures
// Miniflare's bindings cannot produce (a mail service's rate limit, a
// Workflows outage) come from stand-in bindings the test Worker makes
// (`shim=`), so only the verdict mapping is tested against them.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Log, LogLevel } from "miniflare";
import { eventually } from "./harness.mjs";
import { startPlatform } from "./platform_workers.mjs";

// Miniflare's log names each mail's .eml file.
class Captured extends Log {
  lines = [];
  logWithLevel(level, message) {
    this.lines.push(message);
  }
  mails() {
    return this.lines.flatMap((line) => [...line.matchAll(/(\/\S+\.eml)/g)].map((m) => m[1]));
  }
}

const log = new Captured(LogLevel.INFO);
const mf = await startPlatform(log);
after(() => mf.dispose());

async function post(route) {
  const response = await mf.dispatchFetch(`http://main/platform/${route}`, { method: "POST" });
  const body = await response.text();
  assert.equal(response.status, 200, body);
  return JSON.parse(body);
}
const read = async (worker, route) => (await (await mf.getWorker(worker)).fetch(`http://${worker}${route}`)).json();

describe("Cloudflare Email (send_email)", () => {
  it("sends a mail, and the same mail again after a lost reply: one Message-ID", async () => {
    const before = log.mails().length;
    const { id, verdicts, delivered } = await post("deliver/email?to=ada@example.com");
    assert.deepEqual(verdicts, ["delivered", "delivered"]);
    assert.equal(delivered, 1);
    const files = await eventually(() => log.mails().length === before + 2 && log.mails().slice(before));
    const ids = files.map((file) => readFileSync(file, "utf8").match(/^Message-ID: (.*)$/m)[1].trim());
    assert.deepEqual(ids, [`<${id}@app.example>`, `<${id}@app.example>`]);
  });

  it("maps the binding's refusals and failures to verdicts", async () => {
    const refused = await post("deliver/email?to=bob@example.com");
    assert.match(refused.verdicts[1], /^permanent: send_email refused the mail: email to bob@example.com not allowed/);
    const transient = await post(`deliver/email?shim=${encodeURIComponent("internal error, try again")}`);
    assert.match(transient.verdicts[1], /^retry: send_email refused the mail: internal error/);
    const throttled = await post(`deliver/email?shim=${encodeURIComponent("Rate limit exceeded")}`);
    assert.match(throttled.verdicts[1], /^unavailable: /);
  });
});

describe("service bindings", () => {
  it("posts to the other Worker with the same Idempotency-Key and signature after a lost reply", async () => {
    const { id, verdicts } = await post("deliver/service?path=/ok");
    assert.deepEqual(verdicts, ["delivered", "delivered"]);
    const seen = (await read("billing", "/__seen")).filter((request) => request.key === id);
    assert.equal(seen.length, 2);
    for (const request of seen) {
      assert.equal(request.path, "/ok");
      assert.equal(request.webhook_id, id);
      assert.equal(request.signed, true);
      assert.equal(request.body, '{"invoice":"inv-1"}');
    }
  });

  it("maps the other Worker's statuses as HTTP's: 400 permanent, 500 retried, 429 throttled", async () => {
    const verdict = async (status) => (await post(`deliver/service?path=/status/${status}`)).verdicts[1];
    assert.match(await verdict(400), /^permanent: receiver answered 400: billing says 400/);
    assert.match(await verdict(500), /^retry: receiver answered 500/);
    assert.match(await verdict(429), /^unavailable: /);
  });

  it("aborts a request the other Worker never answers, at the deliverer's timeout", async () => {
    const started = performance.now();
    const { verdicts } = await post("deliver/service?path=/hang&timeout_ms=300");
    assert.deepEqual(verdicts.map((v) => v.split(":")[0]), ["retry", "retry"]);
    assert.match(verdicts[1], /no answer within 300 ms; the request was aborted/);
    assert.ok(performance.now() - started < 5_000, "both attempts ended at their timeout");
  });
});

describe("Workflows", () => {
  it("starts one instance, its id the message's, however often it is relayed", async () => {
    const { id, verdicts } = await post("deliver/workflow");
    assert.deepEqual(verdicts, ["delivered", "delivered"]);
    const runs = await eventually(async () => {
      const mine = (await read("flows", "/runs")).filter((run) => run.id === id);
      return mine.length > 0 && mine;
    });
    assert.deepEqual(runs[0].payload, { account: "a-1" });
    // A second run would have been started by now if the relay made one.
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal((await read("flows", "/runs")).filter((run) => run.id === id).length, 1);
  });

  it("maps create's failures: invalid permanent, outage retried, rate limit throttled", async () => {
    const verdict = async (error) => (await post(`deliver/workflow?shim=${encodeURIComponent(error)}`)).verdicts[1];
    assert.match(await verdict("Workflow instance has invalid id"), /^permanent: /);
    assert.match(await verdict("internal error"), /^retry: /);
    assert.match(await verdict("429 Too Many Requests"), /^unavailable: /);
  });

  it("asks the real binding for an instance create did not make, and finds none", async () => {
    const error = encodeURIComponent("internal error");
    const { verdicts } = await post(`deliver/workflow?shim=${error}&shim_get=real`);
    assert.match(verdicts[1], /^retry: the ONBOARDING instance was not created: internal error/);
  });

  it("counts an instance already there as delivered, whatever create said", async () => {
    // Deployed, a second create of one id fails; Miniflare's ignores it.
    const error = encodeURIComponent("instance.already_exists");
    const { verdicts } = await post(`deliver/workflow?shim=${error}&shim_get=found`);
    assert.deepEqual(verdicts, ["delivered", "delivered"]);
  });
});

describe("endpoint kinds", () => {
  it("fans one event out to an address, a Worker, a Workflow and a Queue alike", async () => {
    const mailsBefore = log.mails().length;
    const result = await post("endpoints");
    assert.equal(result.published, 6);
    assert.equal(result.delivered, 4, JSON.stringify(result));
    assert.equal(result.retried, 1);
    const { endpoints, event, after } = result;
    assert.deepEqual(
      Object.fromEntries(Object.entries(endpoints).map(([name, endpoint]) => [name, endpoint.kind])),
      { email: "email", service: "service", failing: "service", workflow: "workflow", queue: "queue", refused: "email" },
    );
    // The mail to the address.
    const [file] = await eventually(() => log.mails().length > mailsBefore && log.mails().slice(mailsBefore));
    const eml = readFileSync(file, "utf8");
    assert.match(eml, /^To: <ops@acme\.example>/m);
    assert.match(eml, new RegExp(`^Subject: Event ${event}`, "m"));
    assert.match(eml, /"account": "a-2"/);
    // The signed POST to the other Worker.
    const posted = (await read("billing", "/__seen")).filter((request) => request.webhook_id === event);
    assert.deepEqual(posted.map((request) => request.path).sort(), ["/hooks", "/status/500"]);
    assert.ok(posted.every((request) => request.signed));
    // The Workflow instance, its id the delivery's, told whose event it is.
    const delivery = `${event}:${endpoints.workflow.id}`;
    const runs = await eventually(async () => {
      const all = await read("flows", "/runs");
      return all.some((run) => run.payload?.event_id === event) && all;
    });
    const run = runs.find((run) => run.payload?.event_id === event);
    assert.deepEqual(run.payload, { event_id: event, endpoint_id: endpoints.workflow.id, payload: { account: "a-2" } });
    assert.match(run.id, /^x[A-Za-z0-9_-]+$/);
    assert.ok(run.id.startsWith(`x${delivery.replace(":", "-")}`.slice(0, 40)), `${run.id} for ${delivery}`);
    // The Queue message, an envelope as the relay sends.
    const queued = await eventually(async () => {
      const all = await read("flows", "/queue");
      return all.some((body) => body.includes(event)) && all;
    });
    const envelope = JSON.parse(queued.find((body) => body.includes(event)));
    assert.equal(envelope.topic, endpoints.queue.id);
    // Every attempt is in its endpoint's log: the failing one with its status.
    for (const name of ["email", "service", "workflow", "queue"]) {
      assert.equal(after[name].attempts.length, 1, name);
      assert.equal(after[name].endpoint.state, "enabled", name);
    }
    assert.equal(after.failing.attempts[0].status, 500);
    assert.equal(after.workflow.attempts[0].status, null);
    // An address the binding refuses is that endpoint's receiver gone: it is disabled, with why.
    assert.equal(after.refused.endpoint.state, "disabled");
    assert.match(after.refused.endpoint.reason, /email to bob@acme\.example not allowed/);
    assert.equal(after.email.endpoint.state, "enabled", "the other mail endpoint is untouched");
  });
});
