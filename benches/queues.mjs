// Relaying into a Cloudflare Queue, and fanned-out drains: subrequests per
// relayed message and relay throughput (outbox → Queue on local Miniflare),
// and how long a backlog takes to drain with K = 1, 4, 16 concurrent drains
// against a delaying sink. Driven by benches/run.mjs.
import { start } from "../tests/e2e/harness.mjs";
import { int, tableInto } from "./markdown.mjs";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Relays `messages` from a D1 outbox into a Queue with one drain (batch 100). */
export async function runRelay(log, { messages = 10_000 } = {}) {
  // A producer only: the relayed messages wait in the Queue unconsumed.
  const mf = await start("tests/d1-worker", { migrate: false, queueProducers: { EVENTS: { queueName: "events" } } });
  try {
    const call = async (route) => {
      const response = await mf.dispatchFetch(`http://worker/relay/${route}`, { method: "POST" });
      const body = await response.json();
      if (response.status !== 200) throw new Error(`${route}: ${JSON.stringify(body)}`);
      return body;
    };
    await call(`seed?count=${messages}`);
    const started = performance.now();
    const report = await call("drain");
    const wallMs = performance.now() - started;
    const state = await call("state");
    log(`relay: ${state.relayed} messages in ${state.relay_calls} send_batch calls, ${wallMs.toFixed(0)} ms`);
    return {
      messages: state.relayed,
      sendCalls: state.relay_calls,
      d1Queries: report.queries,
      wallMs,
      perSecond: (state.relayed / wallMs) * 1000,
      left: state.outbox,
    };
  } finally {
    await mf.dispose();
  }
}

/**
 * Drains a backlog of `backlog` messages (each delivery waits `delayMs` on
 * the sink) with K concurrent drain invocations, as the drain-request
 * Queue's consumer would run them; each invocation drains until nothing is
 * due. `mf` is the bench Worker.
 */
export async function runFanOut(mf, log, { backlog = 2_000, delayMs = 50, ks = [1, 4, 16] } = {}) {
  const get = async (route, params = {}) => {
    const query = new URLSearchParams(params).toString();
    const response = await mf.dispatchFetch(`http://bench/cron/${route}?${query}`, { method: "POST" });
    const body = await response.json();
    if (response.status !== 200) throw new Error(`${route}: ${JSON.stringify(body)}`);
    return body;
  };
  const results = [];
  for (const k of ks) {
    await get("reset");
    const due = Date.now();
    await get("seed", { count: backlog, delay_ms: delayMs, due, spread_ms: 0 });
    const started = performance.now();
    let invocations = 0;
    await Promise.all(
      Array.from({ length: k }, async () => {
        for (;;) {
          const report = await get("drain");
          invocations += 1;
          if (report.claimed === 0) return;
        }
      }),
    );
    const wallMs = performance.now() - started;
    const [total, distinct] = await get("counts");
    log(`fan-out K=${k}: ${distinct} messages in ${wallMs.toFixed(0)} ms, ${total - distinct} delivered twice`);
    results.push({ k, backlog, delayMs, wallMs, delivered: distinct, twice: total - distinct, invocations, ideal: (backlog / (6 * k)) * delayMs });
    await sleep(100);
  }
  return results;
}

/**
 * The BENCHMARKS.md section. `http` is the example's HTTP drain: sink calls
 * per mail; `platform` the platform destinations' drains (benches/platform.mjs).
 */
export function queuesMarkdown(relay, fanOut, http, platform) {
  const lines = [];
  const table = tableInto(lines);
  lines.push(
    "## Cloudflare Queues, Email, service bindings, Workflows: relay, delivery, fanned-out drains",
    "",
    `**Subrequests per message.** ${int(relay.messages)} messages relayed from a D1 outbox into a Queue by one drain`,
    "(`QueueDeliverer`, batch 100, 6 `send_batch` calls in flight), local Miniflare; beside it, the",
    "example's HTTP drain of 1,000 mails (`HttpDeliverer`, one `fetch` each), and the platform's",
    `destinations, ${int(platform.email.messages)} messages each drained by its deliverer with Miniflare's bindings (cron`,
    "limits): mail through `send_email` (`EmailDeliverer`), a POST to a second Worker through a",
    "service binding (`HttpDeliverer::service`), a Workflow instance each (`WorkflowDeliverer`).",
    "Subrequests count the deliverer's calls to the Queue, the mail API or the binding: where they",
    "land (Miniflare's mail log, the second Worker's requests) or, for Workflows, by a proxy around",
    "the binding; D1 queries are the drains' own.",
    "",
  );
  table(
    ["delivery", "subrequests / message", "D1 queries / message", "messages / s"],
    [
      ["Queue relay (`send_batch`)", (relay.sendCalls / relay.messages).toFixed(4), (relay.d1Queries / relay.messages).toFixed(4), int(relay.perSecond)],
      ["HTTP (`fetch` per message)", (http.calls / http.delivered).toFixed(4), (http.queries / http.delivered).toFixed(4), int(http.perSecond)],
      ...[
        ["Email (`send_email` per message)", platform.email],
        ["service binding (`fetch` through it)", platform.service],
        ["Workflows (`create` per message)", platform.workflow],
      ].map(([name, row]) => [name, (row.calls / row.delivered).toFixed(4), (row.queries / row.delivered).toFixed(4), int(row.perSecond)]),
    ],
  );
  lines.push(
    `**Fanned-out drains.** A backlog of ${int(fanOut[0].backlog)} due messages in D1, each delivery a`,
    `subrequest to a sink that answers after ${fanOut[0].delayMs} ms, drained by K drains at once — each`,
    "its own invocation, as the `drain-requests` Queue's consumer runs them (`queue::request_drains`),",
    "with the cron limits (6 deliveries in flight each). Recovery = until no message is due. The",
    "ideal is backlog ÷ (6 K) × delay. \"Delivered twice\" counts repeat deliveries: drains of one",
    "outbox are fenced by their leases.",
    "",
  );
  table(
    ["K drains", "recovery (ms)", "ideal (ms)", "messages / s", "delivered twice", "drain invocations"],
    fanOut.map((f) => [f.k, int(f.wallMs), int(f.ideal), int((f.delivered / f.wallMs) * 1000), f.twice, f.invocations]),
  );
  lines.push(
    "Local D1 runs one query at a time in one process on 2 cores, and every sink request crosses",
    "into Node, so the larger K are bound by this machine before the sink's delay; in production each",
    "drain is an invocation of its own (Queues runs up to 250 consumer invocations at once) and D1's",
    "query latency, not its CPU, paces the claims.",
    "",
  );
  return lines;
}
