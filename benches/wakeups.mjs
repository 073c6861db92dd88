// Outboxes in Durable Objects woken by their alarms, against a D1 outbox
// drained by cron runs: how late deliveries are after their due time, and
// how fast a backlog drains with 1, 10 and 100 objects. Driven by
// benches/run.mjs on the bench Worker (see benches/outbox-bench/src/wakeups.rs).

import { int, tableInto } from "./markdown.mjs";
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The p-th percentile (0..100) of `values`, nearest rank. */
export function percentile(values, p) {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

/**
 * Runs both comparisons on the bench Worker `mf` (with the WAKE objects and
 * the delaying sink). `window` is the span of due times of the lateness run.
 */
export async function runWakeups(mf, log, { lateMessages = 120, objects = 10, windowMs = 60_000, backlog = 3_000, delayMs = 20 } = {}) {
  const get = async (path, params = {}) => {
    const query = new URLSearchParams(params).toString();
    const response = await mf.dispatchFetch(`http://bench${path}?${query}`, { method: "POST" });
    const body = await response.json();
    if (response.status !== 200) throw new Error(`${path}: ${JSON.stringify(body)}`);
    return body;
  };
  const late = (pairs) => pairs.map(([due, at]) => at - due);
  const results = {};

  // 1. Lateness: the same due times, spread over a window, on alarms and on
  //    a cron that fires at each wall-clock minute as `*/1 * * * *` does.
  log(`lateness: ${lateMessages} messages due over ${windowMs / 1000} s, alarms against a cron each minute`);
  await get("/cron/reset");
  const due = Date.now() + 5_000;
  const perObject = lateMessages / objects;
  for (let n = 0; n < objects; n++) {
    // Each object gets its own slice of the window.
    await get(`/wake/late-${n}/seed`, { count: perObject, delay_ms: 0, due: due + (n * windowMs) / objects, spread_ms: windowMs / objects });
  }
  await get("/cron/seed", { count: lateMessages, delay_ms: 0, due, spread_ms: windowMs });
  let cronRuns = 0;
  for (;;) {
    await sleep(60_000 - (Date.now() % 60_000));
    await get("/cron/drain");
    cronRuns += 1;
    if ((await get("/cron/deliveries")).length >= lateMessages) break;
  }
  const alarmPairs = [];
  for (let n = 0; n < objects; n++) alarmPairs.push(...(await get(`/wake/late-${n}/deliveries`)));
  const cronPairs = await get("/cron/deliveries");
  results.lateness = {
    messages: lateMessages,
    windowMs,
    objects,
    cronRuns,
    alarm: summary(late(alarmPairs)),
    cron: summary(late(cronPairs)),
  };
  log(`lateness: alarm p50 ${results.lateness.alarm.p50} ms p99 ${results.lateness.alarm.p99} ms; cron p50 ${results.lateness.cron.p50} ms p99 ${results.lateness.cron.p99} ms`);

  // 2. Scale: one backlog, all due now, spread over K objects, each drained
  //    by its own alarm; beside it the same backlog in D1 drained by cron
  //    runs back to back. Every delivery waits `delayMs` on the sink.
  results.scale = [];
  for (const k of [1, 10, 100]) {
    const start = Date.now();
    await Promise.all(
      Array.from({ length: k }, (_, n) => get(`/wake/scale-${k}-${n}/seed`, { count: backlog / k, delay_ms: delayMs, due: start, spread_ms: 0 })),
    );
    const pairs = [];
    const perObjectDone = [];
    for (let n = 0; n < k; n++) {
      let done;
      while ((done = await get(`/wake/scale-${k}-${n}/deliveries`)).length < backlog / k) await sleep(50);
      pairs.push(...done);
      perObjectDone.push(Math.max(...done.map(([, at]) => at)) - start);
    }
    const last = Math.max(...pairs.map(([, at]) => at));
    results.scale.push({
      kind: `${k} object${k === 1 ? "" : "s"}, alarms`,
      ideal: (k * 6 * 1000) / delayMs,
      messages: pairs.length,
      perSecond: (pairs.length / (last - start)) * 1000,
      lateness: summary(late(pairs)),
      objectDone: { p50: percentile(perObjectDone, 50), max: Math.max(...perObjectDone) },
      runs: null,
    });
    log(`scale ${k} objects: ${pairs.length} in ${last - start} ms`);
  }
  await get("/cron/reset");
  const start = Date.now();
  await get("/cron/seed", { count: backlog, delay_ms: delayMs, due: start, spread_ms: 0 });
  let runs = 0;
  while ((await get("/cron/deliveries")).length < backlog && runs < 20) {
    await get("/cron/drain");
    runs += 1;
  }
  const pairs = await get("/cron/deliveries");
  const last = Math.max(...pairs.map(([, at]) => at));
  results.scale.push({
    kind: "D1, cron drain",
    ideal: (6 * 1000) / delayMs,
    messages: pairs.length,
    perSecond: (pairs.length / (last - start)) * 1000,
    lateness: summary(late(pairs)),
    objectDone: null,
    runs,
  });
  log(`scale D1 cron: ${pairs.length} in ${last - start} ms, ${runs} runs`);
  results.backlog = backlog;
  results.delayMs = delayMs;
  return results;
}

function summary(values) {
  return { p50: percentile(values, 50), p99: percentile(values, 99), max: Math.max(...values), count: values.length };
}

/** The BENCHMARKS.md section for `runWakeups`' results. */
export function wakeupsMarkdown(w) {
  const lines = [];
  const table = tableInto(lines);
  const l = w.lateness;
  lines.push(
    "## Durable Objects: woken by alarms, against a cron drain",
    "",
    `**Lateness.** ${l.messages} messages fall due spread evenly over ${l.windowMs / 1000} s: in ${l.objects}`,
    "Durable Objects (SQLite storage, `DurableObjectDatabase::wake_for`), each woken by its alarm, and in",
    "D1, drained by a cron run at each wall-clock minute as `*/1 * * * *` fires (the bench calls the",
    `drain at the minute; ${l.cronRuns} runs). Lateness = delivered − due; deliveries are no-ops.`,
    "",
  );
  table(
    ["outbox", "lateness p50 (ms)", "p99 (ms)", "max (ms)", "messages"],
    [
      ["Durable Objects, alarms", int(l.alarm.p50), int(l.alarm.p99), int(l.alarm.max), l.alarm.count],
      ["D1, cron each minute", int(l.cron.p50), int(l.cron.p99), int(l.cron.max), l.cron.count],
    ],
  );
  lines.push(
    `**Scale.** A backlog of ${int(w.backlog)} messages, all due at once, each delivery a subrequest to a`,
    `sink that answers after ${w.delayMs} ms: in 1, 10 or 100 objects, each drained by its own alarm`,
    "(`DrainLimits::alarm()`: 6 deliveries in flight per object), beside the same backlog in D1 drained",
    "by cron runs (`DrainLimits::scheduled()`, 6 in flight) called back to back. Lateness is measured",
    "from the moment the backlog was due; \"object done\" is when an object's last delivery landed.",
    "",
  );
  table(
    ["outbox", "messages / s", "ideal / s", "lateness p50 (ms)", "p99 (ms)", "object done p50 (ms)", "object done max (ms)", "cron runs"],
    w.scale.map((s) => [
      s.kind,
      int(s.perSecond),
      int(s.ideal),
      int(s.lateness.p50),
      int(s.lateness.p99),
      s.objectDone ? int(s.objectDone.p50) : "–",
      s.objectDone ? int(s.objectDone.max) : "–",
      s.runs ?? "–",
    ]),
  );
  lines.push(
    "The ideal is 6 deliveries in flight per object (per drain for D1) over the sink's delay.",
    "Locally every object, the sink (Miniflare's outbound service, in Node) and the driver share this",
    "machine's 2 cores, so 100 objects run out of CPU before they run out of connections; on",
    "Cloudflare each object runs where it lives, and throughput grows with the number of objects",
    "until the downstream is the limit. The cron figures leave out the wait for",
    "the first run: in production that is up to a minute, and a backlog larger than one run (45 s)",
    "waits a further minute per run.",
    "",
  );
  return lines;
}
