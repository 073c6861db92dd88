// The Workers the platform destinations' tests and bench run against: the
// test Worker (`tests/d1-worker`) with a `send_email` binding (two allowed
// recipients), a service binding to a second Worker, a Workflow in a third
// that also consumes the EVENTS Queue.
import { Miniflare } from "miniflare";
import { builtWorker, compatibilityDate } from "./harness.mjs";

// A second Worker: answers `/status/<code>` with that status, `/hang` only
// after 10 s, anything else with 200, and keeps every request it saw (GET
// /__seen).
const billing = `
const seen = [];
export default {
  async fetch(request) {
    const url = new URL(request.url);
    if (url.pathname === "/__seen") return Response.json(seen);
    // Answers after 10 s: long past its caller's timeout. (A promise that
    // never settles is ended by workerd at once, as a failed request.)
    if (url.pathname === "/hang") {
      await new Promise((resolve) => setTimeout(resolve, 10_000));
      return new Response("late");
    }
    seen.push({
      path: url.pathname,
      key: request.headers.get("idempotency-key"),
      webhook_id: request.headers.get("webhook-id"),
      signed: (request.headers.get("webhook-signature") ?? "").startsWith("v1,"),
      body: await request.text(),
    });
    const status = url.pathname.match(/^\\/status\\/(\\d+)$/);
    return new Response("billing says " + (status ? status[1] : "ok"), { status: status ? Number(status[1]) : 200 });
  },
};`;

// The Workflow's Worker: each run is kept (GET /runs), and so is each
// message of the EVENTS Queue (GET /queue).
const flows = `
import { WorkflowEntrypoint } from "cloudflare:workers";
const runs = [];
const queued = [];
export class Onboarding extends WorkflowEntrypoint {
  async run(event, step) {
    await step.do("record", async () => { runs.push({ id: event.instanceId, payload: event.payload }); });
  }
}
export default {
  async fetch(request) {
    const url = new URL(request.url);
    if (url.pathname === "/runs") return Response.json(runs);
    if (url.pathname === "/queue") return Response.json(queued);
    return new Response("no such route", { status: 404 });
  },
  async queue(batch) {
    for (const message of batch.messages) queued.push(message.body);
    batch.ackAll();
  },
};`;

/** A Miniflare running the three Workers; `log` receives Miniflare's own lines (the .eml paths). */
export async function startPlatform(log) {
  const mf = new Miniflare({
    log,
    handleRuntimeStdio(stdout, stderr) {
      for (const stream of [stdout, stderr]) {
        if (process.env.E2E_VERBOSE) stream.pipe(stream === stdout ? process.stdout : process.stderr);
        stream.resume();
      }
    },
    workers: [
      {
        name: "main",
        ...builtWorker("tests/d1-worker"),
        compatibilityDate,
        d1Databases: { DB: "platform-db" },
        serviceBindings: { BILLING: "billing" },
        workflows: { ONBOARDING: { name: "onboarding", className: "Onboarding", scriptName: "flows" } },
        email: { send_email: [{ name: "MAIL", allowed_destination_addresses: ["ada@example.com", "ops@acme.example"] }] },
        queueProducers: { EVENTS: { queueName: "platform-events" } },
      },
      { name: "billing", modules: true, script: billing, compatibilityDate },
      {
        name: "flows",
        modules: true,
        script: flows,
        compatibilityDate,
        queueConsumers: { "platform-events": { maxBatchSize: 10, maxBatchTimeout: 0 } },
      },
    ],
  });
  await mf.ready;
  return mf;
}

