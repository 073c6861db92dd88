// Runs every benchmark — ours against the original algorithm and the
// previous version, on D1 inside workerd (Miniflare) and on native SQLite,
// and concurrent drainers on native Postgres beside SQLite — prints a table,
// and rewrites BENCHMARKS.md and benches/chart.png. Run through `npm run bench`.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { gzipSync } from "node:zlib";
import { root, start } from "../tests/e2e/harness.mjs";
import { renderChart } from "./chart.mjs";
import { int, tableInto } from "./markdown.mjs";
import { drainersMarkdown, rollupPairsMarkdown, runDrainers, runRollupPairs } from "./drainers.mjs";
import { postgresClaimMarkdown, runPostgresClaim } from "./postgres_claim.mjs";
import { runSimulation, simulationMarkdown } from "./simulation.mjs";
import { queuesMarkdown, runFanOut, runRelay } from "./queues.mjs";
import { recoveryMarkdown, runRecovery } from "./recovery.mjs";
import { endpointsMarkdown, runEndpoints } from "./endpoints.mjs";
import { runPlatform } from "./platform.mjs";
import { runWakeups, wakeupsMarkdown } from "./wakeups.mjs";
import { costMarkdown, runCost } from "./cost.mjs";
import { benchCaller, benchWorkerOptions } from "./bench_worker.mjs";
import { PREVIOUS, buildPrevious, withPreviousWorker } from "./previous.mjs";

const MESSAGES = Number(process.env.BENCH_MESSAGES ?? 10_000);
const LARGEST = Number(process.env.BENCH_LARGEST ?? 1_000_000);
const LATENCY_MESSAGES = Number(process.env.BENCH_LATENCY_MESSAGES ?? 1_500);
// Rollups on and off: drains long enough (about 1.5 s each on D1) and pairs
// enough that a few per cent can be told from this machine's noise.
const ROLLUP_MESSAGES = Number(process.env.BENCH_ROLLUP_MESSAGES ?? 50_000);
const ROLLUP_PAIRS = Number(process.env.BENCH_ROLLUP_PAIRS ?? 7);
// The drains behind the headline ratios (ours ÷ baseline), each pair this
// many times, the order swapped every repetition.
const DRAIN_REPS = Number(process.env.BENCH_DRAIN_REPS ?? 5);
// Sealed payloads against clear ones: sign-up mails through each path, this
// many a run on D1 (natively MESSAGES), in this many pairs.
const SEAL_MESSAGES = Number(process.env.BENCH_SEAL_MESSAGES ?? 2_000);
const SEAL_PAIRS = Number(process.env.BENCH_SEAL_PAIRS ?? 5);
// Messages per path of the cost table.
const COST_MESSAGES = Number(process.env.BENCH_COST_MESSAGES ?? 2_000);
const BATCHES = [1, 10, 50, 100];
const ALGOS = ["ours", "baseline"];
const log = (...args) => console.error("bench:", ...args);
// The figures of the last whole run, kept so that its report can be rendered again.
const RESULTS = path.join(root, "target", "bench-results.json");

// `BENCH_ONLY=postgres`: only the Postgres claim and the fault simulation,
// their sections of BENCHMARKS.md rewritten in place (the rest as the last
// whole run wrote it).
if (process.env.BENCH_ONLY === "postgres") {
  postgresOnly();
  process.exit(0);
}

// `BENCH_ONLY=platform`: the platform destinations' drains alone, printed
// (BENCHMARKS.md is written by a whole run only).
if (process.env.BENCH_ONLY === "platform") {
  console.log(JSON.stringify(await runPlatform(log), null, 2));
  process.exit(0);
}

// The delaying sink for the latency mix: answers after `?ms=`.
const sink = async (request) => {
  const ms = Number(new URL(request.url).searchParams.get("ms") ?? 0);
  await new Promise((resolve) => setTimeout(resolve, ms));
  return new Response(null, { status: 202 });
};

/** Writes benches/chart.png and BENCHMARKS.md from a whole run's figures. */
async function render(results) {
  writeFileSync(path.join(root, "benches/chart.png"), await renderChart(results));
  const report = markdown(results);
  writeFileSync(path.join(root, "BENCHMARKS.md"), report);
  console.log(report);
}

/**
 * The run's settings: the sizes this file states in the report, as resolved,
 * and every BENCH_* variable but BENCH_ONLY (the other benches' sizes are read
 * from them).
 */
function benchSettings() {
  return {
    sizes: { MESSAGES, LARGEST, LATENCY_MESSAGES, ROLLUP_MESSAGES, ROLLUP_PAIRS, DRAIN_REPS, SEAL_MESSAGES, SEAL_PAIRS, COST_MESSAGES },
    variables: Object.fromEntries(Object.entries(process.env).filter(([name]) => name.startsWith("BENCH_") && name !== "BENCH_ONLY").sort()),
  };
}

// `BENCH_ONLY=render`: BENCHMARKS.md and the chart rendered again from the
// last whole run's figures, after a change of a table's words or layout,
// with the settings that run had (the text states its sizes from them).
if (process.env.BENCH_ONLY === "render") {
  if (!existsSync(RESULTS)) throw new Error(`no kept run at ${RESULTS}: run \`npm run bench\` whole`);
  const kept = JSON.parse(readFileSync(RESULTS, "utf8"));
  if (!kept.settings) throw new Error(`the kept run at ${RESULTS} is of an older format: run \`npm run bench\` whole`);
  const now = JSON.stringify(benchSettings());
  if (JSON.stringify(kept.settings) !== now) {
    throw new Error(`the kept run had the settings ${JSON.stringify(kept.settings)}, not ${now}: render with the same`);
  }
  await render(kept);
  process.exit(0);
}

// The previous version's Worker is built before anything is measured: a
// clone without the history fails here, not an hour in.
if ([undefined, "console", "cost"].includes(process.env.BENCH_ONLY)) buildPrevious(log);

const mf = await start("benches/outbox-bench", benchWorkerOptions(sink));
const call = benchCaller(mf);
const reset = () => call("reset");
const seed = (algo, kind, count) => (count > 0 ? call("seed", { algo, kind, count }) : null);

const CLOCK_TICKS = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }));
/** CPU ms that the workerd processes under this one have used so far (0 where /proc is not). */
function workerdCpuMs() {
  let table;
  try {
    table = execFileSync("ps", ["-e", "-o", "pid=,ppid=,comm="], { encoding: "utf8" });
  } catch {
    return 0;
  }
  const rows = table.trim().split("\n").map((line) => line.trim().split(/\s+/));
  const ours = new Set([String(process.pid)]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const [pid, ppid] of rows) if (ours.has(ppid) && !ours.has(pid)) ours.add(pid), (grew = true);
  }
  let ticks = 0;
  for (const [pid, , comm] of rows) {
    if (!ours.has(pid) || !comm.startsWith("workerd")) continue;
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // The process ended between the two reads.
    }
  }
  return (ticks * 1000) / CLOCK_TICKS;
}

// The operator console over a table of LARGEST rows (500 due, 500
// delivered a minute before, so the rollups have something to read, the
// rest half scheduled for tomorrow, half dead), through the bench Worker
// `on` calls, then, unless told not to, a drain's alert sweeps over the same
// rows.
async function runConsole(on = call, who = "ours", { alertSweeps: withAlertSweeps = true } = {}) {
  await on("reset");
  await on("seed", { algo: "ours", kind: "due", count: 1_000 });
  await on("drain", { algo: "ours", batch: 100, max_calls: 900, max_messages: 500 });
  const rest = LARGEST - 500;
  await on("seed", { algo: "ours", kind: "future", count: Math.floor(rest / 2) });
  await on("seed", { algo: "ours", kind: "dead", count: rest - Math.floor(rest / 2) });
  const { body: reads } = await on("console");
  for (const read of reads) log(`D1 console (${who}) ${read.request}: ${read.status}, ${read.meter.rows_read} rows read`);
  if (!withAlertSweeps) return { rows: LARGEST, reads };
  const { body: alertSweeps } = await on("alert_sweeps");
  for (const sweep of alertSweeps) log(`D1 alert sweep (${who}, ${sweep.rules}, told ${sweep.told}): ${sweep.meter.rows_read} rows read`);
  return { rows: LARGEST, reads, alertSweeps };
}

// `BENCH_ONLY=console`: the console's requests and the alert sweeps alone,
// ours, then the previous version's requests, printed (BENCHMARKS.md is
// written by a whole run only).
if (process.env.BENCH_ONLY === "console") {
  const ours = await runConsole();
  const previous = await withPreviousWorker((previousCall) => runConsole(previousCall, PREVIOUS.name, { alertSweeps: false }));
  console.log(JSON.stringify({ ours, previous }, null, 2));
  await mf.dispose();
  process.exit(0);
}

/**
 * Sealed and clear sign-up mails on D1, with subjects and without: a warm-up
 * run of each, then SEAL_PAIRS runs of each, the order swapped every pair.
 */
async function runSealing() {
  const runs = [];
  for (const subjects of [true, false]) {
    for (const sealed of [true, false]) await call("sealing", { sealed, subjects, messages: SEAL_MESSAGES });
    for (let repetition = 0; repetition < SEAL_PAIRS; repetition++) {
      const order = repetition % 2 === 0 ? [true, false] : [false, true];
      for (const sealed of order) {
        const { body } = await call("sealing", { sealed, subjects, messages: SEAL_MESSAGES });
        log(`D1 sealing ${sealed}, subjects ${subjects} (run ${repetition}): immediate ${body.immediate.ms.toFixed(0)} ms, enqueue ${body.enqueue.ms.toFixed(0)} ms, drain ${body.drain.ms.toFixed(0)} ms`);
        runs.push({ repetition, run: body });
      }
    }
  }
  return runs;
}

// `BENCH_ONLY=sealing`: sealed against clear on D1 alone, printed
// (BENCHMARKS.md is written by a whole run only).
if (process.env.BENCH_ONLY === "sealing") {
  const runs = await runSealing();
  console.log(sealingMarkdown({ d1: runs, sqlite: [] }).join("\n"));
  await mf.dispose();
  process.exit(0);
}

// `BENCH_ONLY=endpoints`: the endpoints' sections alone, printed (BENCHMARKS.md
// is written by a whole run only).
if (process.env.BENCH_ONLY === "endpoints") {
  console.log(endpointsMarkdown(await runEndpoints(call, log)).join("\n"));
  await mf.dispose();
  process.exit(0);
}

/** Drains `messages` due messages in invocations of at most 900 D1 calls each. */
async function d1Drain(algo, batch, messages = MESSAGES) {
  await reset();
  await seed(algo, "due", messages);
  const total = { messages: 0, calls: 0, statements: 0, rows_read: 0, rows_written: 0, wallMs: 0, invocations: 0 };
  const cpuBefore = workerdCpuMs();
  while (total.messages < messages) {
    const { body, wallMs } = await call("drain", { algo, batch, max_calls: 900, max_messages: 1_000_000 });
    total.invocations += 1;
    total.wallMs += wallMs;
    total.messages += body.messages;
    for (const key of ["calls", "statements", "rows_read", "rows_written"]) total[key] += body.meter[key];
    if (body.messages === 0) break;
  }
  const cpuMs = workerdCpuMs() - cpuBefore;
  log(`D1 drain ${algo} batch ${batch}: ${total.messages} msgs, ${total.calls} calls, ${total.wallMs.toFixed(0)} ms, workerd CPU ${cpuMs.toFixed(0)} ms`);
  return {
    algo,
    batch,
    ...total,
    msgsPerSecond: (total.messages / total.wallMs) * 1000,
    cpuUsPerMessage: (cpuMs * 1000) / Math.max(1, total.messages),
  };
}

// `BENCH_ONLY=cost`: the rows a message costs on each path, printed
// (BENCHMARKS.md is written by a whole run only).
if (process.env.BENCH_ONLY === "cost") {
  const cost = await withPreviousWorker((previousCall) => runCost(call, previousCall, log, COST_MESSAGES));
  console.log(JSON.stringify(cost, null, 2));
  await mf.dispose();
  process.exit(0);
}

const results = {
  date: new Date().toISOString(),
  machine: { cpus: os.cpus().length, cpu: os.cpus()[0]?.model ?? "unknown CPU", memoryGiB: Math.round(os.totalmem() / 2 ** 30), node: process.version },
  settings: benchSettings(),
  d1: {},
  sqlite: {},
};

results.d1.drainRuns = [];
for (let repetition = 0; repetition < DRAIN_REPS; repetition++) {
  const order = repetition % 2 === 0 ? ALGOS : [...ALGOS].reverse();
  for (const algo of order) {
    for (const batch of BATCHES) results.d1.drainRuns.push({ ...(await d1Drain(algo, batch)), repetition });
  }
}
results.d1.drain = medianRuns(results.d1.drainRuns);

// Rollups on and off, side by side: a warm-up drain of each (not recorded),
// then ROLLUP_PAIRS each, the order swapped every repetition, so that a
// drift over the runs (the engine warming up) favours neither.
results.d1.rollups = [];
for (const algo of ["ours", "ours-no-rollups"]) await d1Drain(algo, 100, ROLLUP_MESSAGES);
for (let repetition = 0; repetition < ROLLUP_PAIRS; repetition++) {
  const order = repetition % 2 === 0 ? ["ours", "ours-no-rollups"] : ["ours-no-rollups", "ours"];
  for (const algo of order) results.d1.rollups.push(await d1Drain(algo, 100, ROLLUP_MESSAGES));
}

results.d1.budget = [];
for (const [algo, batch] of [["ours", 100], ["ours", 500], ["baseline", 100]]) {
  for (const budget of [1000, 50]) {
    await reset();
    const backlog = algo === "ours" ? Math.min(batch * budget, 300_000) : 2 * budget;
    await seed(algo, "due", backlog);
    const { body } = await call("drain", { algo, batch, max_calls: budget, max_messages: 10_000_000 });
    log(`D1 budget ${algo} batch ${batch} within ${budget} calls: ${body.messages}`);
    results.d1.budget.push({ algo, batch, budget, messages: body.messages, calls: body.meter.calls });
  }
}

async function claimRun(algo, due, others, kinds) {
  await reset();
  await seed(algo, "due", due);
  for (const [kind, count] of kinds(others)) await seed(algo, kind, count);
  const { body } = await call("claims", { algo, batch: 100, claims: 5 });
  return {
    meanMs: body.mean_ms,
    readsPerClaimed: body.meter.rows_read / Math.max(1, body.claimed),
    claimed: body.claimed,
  };
}

results.d1.claim = [];
for (let rows = 1_000; rows <= LARGEST; rows *= 10) {
  for (const algo of ALGOS) {
    const run = await claimRun(algo, 500, rows - 500, (n) => [["future", Math.floor(n / 2)], ["dead", n - Math.floor(n / 2)]]);
    log(`D1 claim ${algo} with ${rows} rows: ${run.meanMs.toFixed(2)} ms, ${run.readsPerClaimed.toFixed(2)} reads/row`);
    results.d1.claim.push({ algo, rows, ...run });
  }
}

results.d1.console = await runConsole();
// The previous version's Worker, beside ours: its console on the same table, and its cost per path.
await withPreviousWorker(async (previousCall) => {
  results.d1.previousConsole = await runConsole(previousCall, PREVIOUS.name, { alertSweeps: false });
  results.d1.cost = await runCost(call, previousCall, log, COST_MESSAGES);
});

results.d1.stuck = [];
for (const kind of ["stuck", "dead"]) {
  for (const count of [0, 1_000, 100_000]) {
    const run = await claimRun("ours", 1_000, count, (n) => [[kind, n]]);
    log(`D1 claim beside ${count} ${kind} rows: ${run.readsPerClaimed.toFixed(3)} reads/claimed row`);
    results.d1.stuck.push({ kind, count, ...run });
  }
}

results.d1.sealing = await runSealing();

await reset();
results.d1.signup = (await call("signup", { iterations: 200 })).body;
results.d1.endpoints = await runEndpoints(call, log);

// The streaming drain against the batch loop it replaced: database calls per
// message with no-op deliveries, and throughput against a log-normal
// downstream (median 15 ms, p99 200 ms, 1% hanging to the 1 s timeout).
results.d1.loop = [];
for (const algo of ["ours", "batch-loop"]) {
  await reset();
  await seed(algo, "due", MESSAGES);
  const { body } = await call("drain", { algo, batch: 100, max_calls: 1_000_000, max_messages: 10_000_000 });
  log(`D1 no-op drain ${algo}: ${body.messages} msgs, ${body.meter.calls} calls`);
  results.d1.loop.push({ algo, messages: body.messages, calls: body.meter.calls });
}
results.d1.latency = [];
for (const algo of ["ours", "batch-loop"]) {
  const { body } = await call("latency", { algo, count: LATENCY_MESSAGES, concurrency: 6, scale: 0.1, timeout_ms: 1000 });
  log(`D1 latency mix ${body.algo}: ${body.per_second.toFixed(1)}/s of an ideal ${body.ideal_per_second.toFixed(1)}/s`);
  results.d1.latency.push(body);
}
results.wakeups = await runWakeups(mf, log);
results.fanOut = await runFanOut(mf, log);
await mf.dispose();

log("relay into a Queue");
results.relay = await runRelay(log);

log("the platform's destinations: send_email, a service binding, Workflows");
results.platform = await runPlatform(log);

log("example Worker: a 1,000-message cron drain");
{
  const sink = { status: 503, calls: 0 };
  const logs = [];
  const example = await start("examples/signup-mail", {
    onLog: (chunk) => logs.push(chunk),
    bindings: {
      MAIL_API_URL: "https://mail.test/send",
      ADMIN_TOKEN: "bench",
      BACKOFF_BASE_MS: "10",
      BACKOFF_CAP_MS: "20",
    },
    outboundService: () => {
      sink.calls += 1;
      return new Response("{}", { status: sink.status });
    },
  });
  const signups = 1_000;
  for (let n = 0; n < signups; n++) {
    await example.dispatchFetch("http://example.test/signup", {
      method: "POST",
      body: JSON.stringify({ email: `bench${n}@example.com` }),
    });
  }
  const db = await example.getD1Database("DB");
  const pending = async () => (await db.prepare("SELECT COUNT(*) AS n FROM outbox WHERE lease_token IS NULL").first()).n;
  while ((await pending()) < signups) await new Promise((resolve) => setTimeout(resolve, 50));
  await new Promise((resolve) => setTimeout(resolve, 100));
  sink.status = 202;
  sink.calls = 0;
  const logged = logs.length;
  const started = performance.now();
  await (await example.getWorker()).scheduled({ cron: "*/1 * * * *" });
  const wallMs = performance.now() - started;
  // The cron run's mail drain report, as the Worker logged it (a JSON line).
  const mailDrain = () =>
    logs
      .slice(logged)
      .join("")
      .split("\n")
      .filter((line) => line.includes('"event":"outbox.drain"'))
      .map((line) => JSON.parse(line.slice(line.indexOf("{"))))
      .find((report) => report.outbox === "outbox");
  while (!mailDrain()) await new Promise((resolve) => setTimeout(resolve, 20));
  results.exampleDrain = { report: mailDrain(), wallMs };
  const { report } = results.exampleDrain;
  results.httpDrain = {
    calls: sink.calls,
    delivered: report.delivered,
    queries: report.queries,
    perSecond: (report.delivered / results.exampleDrain.wallMs) * 1000,
  };
  await example.dispose();
}

log("native SQLite");
const native = JSON.parse(
  execFileSync(path.join(root, "target/release/outbox-bench-native"), [MESSAGES, LARGEST, ROLLUP_MESSAGES, ROLLUP_PAIRS, DRAIN_REPS].map(String), {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
    maxBuffer: 64 * 1024 * 1024,
  }),
);
results.sqlite.drainRuns = native.drain.map(({ algo, batch, repetition, run }) => ({
  algo,
  batch,
  repetition,
  messages: run.messages,
  calls: run.meter.calls,
  statements: run.meter.statements,
  wallMs: run.elapsed_ms,
  msgsPerSecond: (run.messages / run.elapsed_ms) * 1000,
}));
results.sqlite.drain = medianRuns(results.sqlite.drainRuns);
results.sqlite.claim = native.claim.map(({ algo, rows, run }) => ({ algo, rows, meanMs: run.mean_ms }));
results.sqlite.loop = native.loop.map(({ algo, run }) => ({ algo, messages: run.messages, calls: run.meter.calls }));
results.sqlite.latency = native.latency;
results.sqlite.rollups = native.rollups.map(({ algo, run }) => ({
  algo,
  messages: run.messages,
  calls: run.meter.calls,
  statements: run.meter.statements,
  wallMs: run.elapsed_ms,
  msgsPerSecond: (run.messages / run.elapsed_ms) * 1000,
}));

results.sqlite.sealing = native.sealing;

results.drainers = runDrainers(root, log);
results.rollupPairs = runRollupPairs(root, log);
results.recovery = runRecovery(root, log);
results.postgresClaim = runPostgresClaim(root, log);
results.simulation = runSimulation(root, log);

const wasm = readFileSync(path.join(root, "examples/signup-mail/build/index_bg.wasm"));
// The same build before its function-name section was dropped (scripts/build-worker.sh).
const named = readFileSync(path.join(root, "examples/signup-mail/build/with-names.wasm"));
results.wasm = {
  bytes: wasm.length,
  gzipped: gzipSync(wasm, { level: 9 }).length,
  namedBytes: named.length,
  namedGzipped: gzipSync(named, { level: 9 }).length,
};

writeFileSync(RESULTS, JSON.stringify(results));
await render(results);

// ---------------------------------------------------------------------------

/** Of each (algorithm, batch), the run of median throughput among its repetitions (the lower middle of an even count). */
function medianRuns(runs) {
  const typical = [];
  for (const algo of ALGOS) {
    for (const batch of BATCHES) {
      const of = runs.filter((x) => x.algo === algo && x.batch === batch).sort((a, b) => a.msgsPerSecond - b.msgsPerSecond);
      if (of.length) typical.push(of[Math.floor((of.length - 1) / 2)]);
    }
  }
  return typical;
}

/** Ours ÷ baseline throughput at `batch`, per repetition: "median× (low – high)". */
function ratioSpread(runs, batch) {
  const reps = [...new Set(runs.map((x) => x.repetition))];
  const ratios = reps
    .map((k) => {
      const of = (algo) => runs.find((x) => x.algo === algo && x.batch === batch && x.repetition === k);
      return of("ours").msgsPerSecond / of("baseline").msgsPerSecond;
    })
    .sort((a, b) => a - b);
  const m = ratios.length % 2 ? ratios[(ratios.length - 1) / 2] : (ratios[ratios.length / 2 - 1] + ratios[ratios.length / 2]) / 2;
  return `**${m.toFixed(1)}×** (${ratios[0].toFixed(1)} – ${ratios[ratios.length - 1].toFixed(1)})`;
}

function markdown(r) {
  const find = (list, algo, key, value) => list.find((x) => x.algo === algo && x[key] === value);
  const fmt = (n, digits = 2) => (n === undefined || n === null ? "–" : Number(n).toFixed(digits));
  const lines = [];
  const table = tableInto(lines);
  lines.push(
    "# Benchmarks",
    "",
    "Regenerated by `npm run bench` (`scripts/bench.sh` → `benches/run.mjs`); do not edit by hand.",
    "",
    `- Date: ${r.date.slice(0, 10)}`,
    `- Machine: ${r.machine.cpus} × ${r.machine.cpu}, ${r.machine.memoryGiB} GiB, Node ${r.machine.node}`,
    "- D1: local D1 inside workerd (Miniflare 4.20260426.0), in-memory; one HTTP invocation per drain",
    "  of at most 900 D1 calls, like one cron run on the Paid plan. SQLite: a file in WAL mode.",
    "- Baseline: the original algorithm (`shared/reference/outbox.rs`) rebuilt on the same `Database`",
    "  port (`benches/outbox-bench/src/baseline.rs`): claim = one `SELECT` + one guarded `UPDATE` per row,",
    "  one `DELETE` per delivered row. Deliveries are no-ops: this measures bookkeeping only.",
    `- The ${PREVIOUS.name}: its own bench Worker, built from that commit by the same run`,
    "  (`benches/previous.mjs`), beside ours in the D1 cost table and the console's table.",
    `- Every drain delivers ${int(MESSAGES)} messages.`,
    "",
    "![round trips and throughput per batch size](benches/chart.png)",
    "",
    "## The streaming drain against the batch loop it replaced",
    "",
    `Batch 100, 6 deliveries in flight. **Calls per message**: ${int(MESSAGES)} no-op deliveries;`,
    "outcomes ride along with the next claim, so a batch costs one call instead of two.",
    "**Throughput**: deliveries take a log-normal time (median 150 ms, p99 2 s, scaled ×0.1 to",
    "15 ms and 200 ms) and 1% hang until the delivery timeout (1 s); the ideal is",
    "`concurrency / mean time a delivery holds its slot`. Natively the deliverer sleeps; on D1 it",
    "makes a subrequest to a sink that answers after the delay. The batch loop waits for its",
    "slowest delivery before the next claim; the streaming drain keeps every slot busy.",
    "",
  );
  const callsPer = (list, algo) => {
    const x = list.find((y) => y.algo === algo);
    return x ? fmt(x.calls / x.messages, 4) : "–";
  };
  const speed = (list, algo) => {
    const x = list.find((y) => y.algo === algo);
    return x ? `${fmt(x.per_second, 1)} of ${fmt(x.ideal_per_second, 1)} (**${fmt((100 * x.per_second) / x.ideal_per_second, 1)}%**)` : "–";
  };
  table(
    ["backend", "loop", "database calls / delivered message (no-op)", "deliveries / s under the latency mix, of the ideal"],
    [
      ["D1", "streaming (ours)", callsPer(r.d1.loop, "ours"), speed(r.d1.latency, "streaming")],
      ["D1", "batch loop (before)", callsPer(r.d1.loop, "batch-loop"), speed(r.d1.latency, "batch-loop")],
      ["SQLite", "streaming (ours)", callsPer(r.sqlite.loop, "ours"), speed(r.sqlite.latency, "streaming")],
      ["SQLite", "batch loop (before)", callsPer(r.sqlite.loop, "batch-loop"), speed(r.sqlite.latency, "batch-loop")],
    ],
  );
  lines.push(
    "## Rollups on and off",
    "",
    "The same no-op drain of the same backlog at batch 100, with the outbox's rollups on (the",
    "default: counts and histograms written in the same atomic call as each settle) and off.",
    `Each run drains ${int(ROLLUP_MESSAGES)} messages; ${ROLLUP_PAIRS} runs each after a warm-up run of each,`,
    "in pairs whose order swaps every repetition (on first, then off first). Median (range) of",
    `the ${ROLLUP_PAIRS}; on / off is the median (range) of the pairs' ratios, and the ratio of the two`,
    "medians. On D1, workerd's own CPU time per message (from /proc, user + system, 10 ms",
    "ticks) is given beside the wall-clock rate: it does not count the time the runner waits.",
    "",
  );
  const median = (values) => {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted[Math.floor(sorted.length / 2)];
  };
  const spread = (values, digits) =>
    `${fmt(median(values), digits)} (${fmt(Math.min(...values), digits)} – ${fmt(Math.max(...values), digits)})`;
  const rollupRows = [];
  for (const [backend, list] of [["D1", r.d1.rollups], ["SQLite", r.sqlite.rollups]]) {
    const of = (algo) => list.filter((x) => x.algo === algo);
    const speeds = (algo) => of(algo).map((x) => x.msgsPerSecond);
    const cpus = (algo) => of(algo).map((x) => x.cpuUsPerMessage);
    const hasCpu = backend === "D1" && cpus("ours").every((x) => x > 0);
    for (const [algo, label] of [["ours", "on"], ["ours-no-rollups", "off"]]) {
      const runs = of(algo);
      rollupRows.push([
        backend,
        label,
        spread(runs.map((x) => x.calls / x.messages), 4),
        spread(runs.map((x) => x.statements / x.messages), 3),
        backend === "D1" ? spread(runs.map((x) => x.rows_read / x.messages), 2) : "–",
        hasCpu ? spread(cpus(algo), 1) : "–",
        spread(speeds(algo), 0),
      ]);
    }
    const ratios = of("ours").map((x, i) => x.msgsPerSecond / of("ours-no-rollups")[i].msgsPerSecond);
    const cpuRatios = of("ours").map((x, i) => of("ours-no-rollups")[i].cpuUsPerMessage / x.cpuUsPerMessage);
    rollupRows.push([
      backend,
      "**on / off**",
      "",
      "",
      "",
      hasCpu ? `off / on: ${spread(cpuRatios.map((x) => 100 * x), 1)} %` : "",
      `**${spread(ratios.map((x) => 100 * x), 1)} %**`,
    ]);
    rollupRows.push([backend, "on / off, of the medians", "", "", "", "", `${fmt((100 * median(speeds("ours"))) / median(speeds("ours-no-rollups")), 1)} %`]);
  }
  table(["backend", "rollups", "database calls / msg", "statements / msg", "rows read / msg", "workerd CPU µs / msg", "msgs / s"], rollupRows);
  lines.push(...costMarkdown(r.d1.cost));
  lines.push(...sealingMarkdown({ d1: r.d1.sealing, sqlite: r.sqlite.sealing }));
  lines.push(
    "## Draining on D1: cost per delivered message",
    "",
  );
  table(
    ["batch", "algorithm", "D1 round trips / msg", "statements / msg", "rows read / msg", "rows written / msg", "msgs / s", "invocations"],
    r.d1.drain.map((x) => [
      x.batch,
      x.algo,
      fmt(x.calls / x.messages, 3),
      fmt(x.statements / x.messages, 3),
      fmt(x.rows_read / x.messages, 2),
      fmt(x.rows_written / x.messages, 2),
      int(x.msgsPerSecond),
      x.invocations,
    ]),
  );
  lines.push(
    "## Ours against the baseline",
    "",
    `Each pair drained ${DRAIN_REPS} times (the order of the two swapped every repetition): the median`,
    "(range) of the repetitions' ratios, so that a change can be told from this machine's noise.",
    "The drain tables above and below show, of each, the run of median throughput. Round trips",
    "do not vary between runs.",
    "",
  );
  table(
    ["batch", "round trips: baseline / ours", "D1 throughput: ours / baseline", "SQLite throughput: ours / baseline"],
    BATCHES.map((batch) => {
      const [o, b] = [find(r.d1.drain, "ours", "batch", batch), find(r.d1.drain, "baseline", "batch", batch)];
      return [
        batch,
        `${fmt(b.calls / b.messages / (o.calls / o.messages), 1)}×`,
        ratioSpread(r.d1.drainRuns, batch),
        ratioSpread(r.sqlite.drainRuns, batch),
      ];
    }),
  );
  lines.push("## Draining on native SQLite (file, WAL)", "");
  table(
    ["batch", "algorithm", "round trips / msg", "statements / msg", "msgs / s"],
    r.sqlite.drain.map((x) => [x.batch, x.algo, fmt(x.calls / x.messages, 3), fmt(x.statements / x.messages, 3), int(x.msgsPerSecond)]),
  );
  lines.push("## Messages drained within one invocation's D1 query budget", "");
  table(
    ["algorithm", "batch", "within 1,000 queries", "within 50 queries"],
    [["ours", 100], ["ours", 500], ["baseline", 100]].map(([algo, batch]) => {
      const within = (budget) => r.d1.budget.find((x) => x.algo === algo && x.batch === batch && x.budget === budget);
      return [algo, batch, int(within(1000).messages), int(within(50).messages)];
    }),
  );
  lines.push("## Claim time as the table grows", "");
  lines.push("500 due rows; the rest half scheduled for tomorrow, half dead. Mean of 5 claims of 100.", "");
  const sizes = [...new Set(r.d1.claim.map((x) => x.rows))];
  table(
    ["rows in table", "ours D1 (ms)", "baseline D1 (ms)", "ours SQLite (ms)", "baseline SQLite (ms)", "ours D1 rows read / claimed"],
    sizes.map((rows) => [
      int(rows),
      fmt(find(r.d1.claim, "ours", "rows", rows).meanMs),
      fmt(find(r.d1.claim, "baseline", "rows", rows).meanMs),
      fmt(find(r.sqlite.claim, "ours", "rows", rows)?.meanMs),
      fmt(find(r.sqlite.claim, "baseline", "rows", rows)?.meanMs),
      fmt(find(r.d1.claim, "ours", "rows", rows).readsPerClaimed),
    ]),
  );
  const first = find(r.d1.claim, "ours", "rows", sizes[0]);
  const last = find(r.d1.claim, "ours", "rows", sizes.at(-1));
  const sFirst = find(r.sqlite.claim, "ours", "rows", sizes[0]);
  const sLast = find(r.sqlite.claim, "ours", "rows", sizes.at(-1));
  lines.push(
    `Ours at ${int(sizes.at(-1))} rows ÷ at ${int(sizes[0])}: D1 ${fmt(last.meanMs / first.meanMs)}×, SQLite ${fmt(sLast.meanMs / sFirst.meanMs)}×.`,
    "",
    `## The operator console on a table of ${int(r.d1.console.rows)} rows (D1)`,
    "",
    "Each request of the console's page and API once, in the order a page view sends them, then",
    "the filters a user adds: 500 due rows, the rest half scheduled for tomorrow, half dead, and a",
    "minute of rollups. Default bounds: counts stop at 200 per state, a page walks at most 1,000",
    "rows of its state. Then an operator's changes, each written with its audit entry (one row",
    "inserted in the change's call, its result written right after: 2 rows, and their index",
    "entries): 100 scheduled messages made due now by the keys a page of them gave, a topic paused",
    "and resumed; and a page of the audit log. Then a tenant's portal link (one endpoint, none of",
    "the rows its deliveries). Last, the fleet view over a registry of 10,000 members (one in ten",
    "with dead letters, one in five with a message due; a page is 50 rows, the first and the next",
    "in each order), and a member's report",
    "of this outbox after a drain: its summary read (counts stop at 101) and its row written, then",
    "again with nothing changed. Rows read and written as D1 reports them (written: index entries",
    `included). Beside ours, the rows the ${PREVIOUS.name} read for the requests it made, on the same table.`,
    "",
  );
  // The previous version's request of the same name, where it made one (names are unique).
  const previousReads = new Map(r.d1.previousConsole.reads.map((x) => [x.request, x]));
  table(
    ["request", "path", "status", "D1 calls", "rows read", `rows read, ${PREVIOUS.name}`, "rows written", "ms"],
    r.d1.console.reads.map((x) => {
      const previous = previousReads.get(x.request);
      return [
        x.request,
        `\`${x.path.replace(/ep_[0-9A-Z]{26}/, "ep_…")}\``,
        x.status,
        x.meter.calls,
        int(x.meter.rows_read),
        previous ? int(previous.meter.rows_read) : "–",
        int(x.meter.rows_written),
        fmt(x.ms, 1),
      ];
    }),
  );
  // What an open page costs a day: its first view, and an auto-refresh
  // (the live numbers and the charts' last two minutes) at each interval.
  const read = (name) => r.d1.console.reads.find((x) => x.request === name)?.meter.rows_read ?? 0;
  const refreshRows = read("an auto-refresh: due now, oldest, paused") + read("an auto-refresh: the charts' last 2 minutes");
  const FREE_READS_A_DAY = 5_000_000;
  const previousOverview = r.d1.previousConsole.reads.find((x) => x.request === "overview: counts per state")?.meter.rows_read ?? 0;
  lines.push(
    `**An auto-refresh reads ${int(refreshRows)} rows** (the two requests above); the overview's counts are read`,
    "on a page view, after an action and on \"Refresh now\" only. The previous version's auto-refresh read the",
    `overview again, and more (its dead-letter groups and a page of messages): at least ${int(previousOverview)} rows. An open page a day, by interval:`,
    "",
  );
  table(
    ["interval", "auto-refreshes a day", "rows read a day", "of the free plan's 5,000,000"],
    [10, 30, 60].map((seconds) => {
      const refreshes = 86_400 / seconds;
      return [`${seconds} s${seconds === 30 ? " (default)" : ""}`, int(refreshes), int(refreshes * refreshRows), `${fmt((100 * refreshes * refreshRows) / FREE_READS_A_DAY, 1)} %`];
    }),
  );
  const sweeps = r.d1.console.alertSweeps;
  const none = sweeps.find((x) => x.rules === "none");
  lines.push(
    "### Alert rules: what a drain's sweep reads for them (D1)",
    "",
    "The same rows, after a drain delivered what was due: a new drainer's drain (it claims",
    "nothing, and sweeps at its first claim) with no rule, then with two rules twice: the first",
    "sweep of the window tells the rule that holds (at least 10 dead letters within the hour: the",
    `table holds ${int(Math.floor((r.d1.console.rows - 500) / 2))} that died in it) to the operator's endpoint, the second does not.`,
    "",
  );
  table(
    ["rules", "told", "D1 calls", "rows read", "rows written", "rows read for the rules"],
    sweeps.map((x) => [x.rules, x.told ? "yes" : "no", x.meter.calls, int(x.meter.rows_read), int(x.meter.rows_written), x === none ? "–" : int(x.meter.rows_read - none.meter.rows_read)]),
  );
  lines.push(
    "## Claims beside stuck leases and dead letters (D1)",
    "",
    "1,000 due rows beside N rows leased until tomorrow and never settled, or N dead rows.",
    "",
  );
  table(
    ["N", "rows read / claimed row (stuck leases)", "rows read / claimed row (dead rows)"],
    [0, 1_000, 100_000].map((count) => [
      int(count),
      fmt(r.d1.stuck.find((x) => x.kind === "stuck" && x.count === count).readsPerClaimed, 3),
      fmt(r.d1.stuck.find((x) => x.kind === "dead" && x.count === count).readsPerClaimed, 3),
    ]),
  );
  const s = r.d1.signup;
  const n = s.iterations;
  lines.push(
    "## The sign-up hot path (D1)",
    "",
    `Mean of ${n} batches. The outbox row rides in the same batch as the account; the \`wait_until\``,
    "attempt then settles the pre-leased row with one call.",
    "",
  );
  table(
    ["figure", "value"],
    [
      ["account insert alone (ms)", fmt(s.account_alone_ms)],
      ["account insert + outbox row (ms)", fmt(s.account_and_outbox_ms)],
      ["extra latency of the outbox row (ms)", fmt(s.account_and_outbox_ms - s.account_alone_ms)],
      ["D1 calls after the business batch, per message", fmt(s.hot_path_settle.calls / n)],
      ["rows written: plain message insert", fmt(s.plain_insert.rows_written / n)],
      ["rows written: settle (delete)", fmt(s.hot_path_settle.rows_written / n)],
      ["rows written, enqueue to delete (plain message)", fmt((s.plain_insert.rows_written + s.hot_path_settle.rows_written) / n)],
      ["rows written, enqueue to delete (example: subject + dedup key)", fmt((s.example_insert.rows_written + s.hot_path_settle.rows_written) / n)],
    ],
  );
  lines.push(...endpointsMarkdown(r.d1.endpoints));
  const e = r.exampleDrain.report;
  lines.push(
    "## The example Worker: one cron drain of 1,000 mails (D1)",
    "",
    "1,000 sign-ups while the mail API refused them (each immediate attempt failed and was",
    "rescheduled), then one cron run (`scheduled`): its mail drain with the cron limits (batch 100,",
    "6 deliveries in flight, the 900-query budget less the relay's share) and a mail API that",
    "answers at once. The report is the drain's JSON log line; the wall time is the whole cron run.",
    "",
  );
  table(
    ["claimed", "delivered", "batches", "D1 queries", "messages / query", "wall time (ms)", "stopped"],
    [[e.claimed, e.delivered, e.batches, e.queries, fmt(e.delivered / e.queries, 1), int(r.exampleDrain.wallMs), e.stopped.reason]],
  );
  lines.push(...wakeupsMarkdown(r.wakeups));
  lines.push(...queuesMarkdown(r.relay, r.fanOut, r.httpDrain, r.platform));
  lines.push(...drainersMarkdown(r.drainers));
  lines.push(...rollupPairsMarkdown(r.rollupPairs));
  lines.push(...recoveryMarkdown(r.recovery));
  lines.push(...postgresClaimMarkdown(r.postgresClaim));
  lines.push(...simulationMarkdown(r.simulation));
  lines.push(
    "## Size",
    "",
    `The example Worker's wasm: ${int(r.wasm.bytes)} bytes, ${int(r.wasm.gzipped)} bytes gzipped (${fmt(r.wasm.gzipped / 1024 / 1024, 2)} MB).`,
    `The same build with the function-name section worker-build keeps (the example drops it:`,
    `\`strip-wasm-names\` in its Cargo.toml): ${int(r.wasm.namedBytes)} bytes, ${int(r.wasm.namedGzipped)} gzipped (${fmt(r.wasm.namedGzipped / 1024 / 1024, 2)} MB).`,
    `The names cost ${int(r.wasm.namedGzipped - r.wasm.gzipped)} gzipped bytes; a panic's stack shows \`wasm-function[N]\` without them.`,
    "",
    "## Reading the figures",
    "",
    "- **Rows written.** Every message is written at least twice: its insert and its delete. A",
    "  message delivered by the `wait_until` attempt (pre-leased at insert) costs exactly that floor.",
    "  One delivered by a drain costs one more write, the lease; so does the baseline's drain, whose",
    "  claim `UPDATE` is its lease. Secondary indexes add an insert write only when a message uses",
    "  them (a dedup key, an ordering key, a caller-given id).",
    "- **Rows read per claimed row** is about 4 whatever the backlog: the claim walks the primary",
    "  key once to find its bound, once to lease, moves each row to its lease's key, and returns it;",
    "  plus 3 per claim for the bound itself. Leased, scheduled, waiting and dead rows sit outside",
    "  the range it walks.",
    `- **Noise.** Absolute rates differ from machine to machine of the same kind (and from run to`,
    `  run on one). The ratios to read are run as repeated pairs and given as median (range): ours ÷`,
    `  baseline (${DRAIN_REPS} pairs), rollups on ÷ off (${ROLLUP_PAIRS} pairs), Postgres's default naptime ÷ 1 s and`,
    "  floor ÷ before (its own repetitions). Every other figure is one run: a claim's time as the table",
    "  grows, the console's rows read (exact counts, which do not vary), wake-ups, Queues, the",
    "  held-snapshot and soak series (each a run of 1,000,000 messages over minutes).",
    "",
  );
  return lines.join("\n");
}

/** Runs the Postgres sections alone and rewrites just them in BENCHMARKS.md. */
function postgresOnly() {
  const file = path.join(root, "BENCHMARKS.md");
  let report = readFileSync(file, "utf8");
  const replaceSection = (lines, heading, before) => {
    const text = lines.join("\n");
    const start = report.indexOf(`\n${heading}`);
    if (start < 0) {
      const at = report.indexOf(`\n${before}`);
      report = `${report.slice(0, at + 1)}${text}\n${report.slice(at + 1)}`;
      return;
    }
    const end = report.indexOf("\n## ", start + heading.length + 1);
    report = `${report.slice(0, start + 1)}${text}\n${report.slice(end + 1)}`;
  };
  const claim = postgresClaimMarkdown(runPostgresClaim(root, log));
  replaceSection(claim, claim[0], "## The fault simulation");
  const simulation = simulationMarkdown(runSimulation(root, log));
  replaceSection(simulation, simulation[0], "## Size");
  writeFileSync(file, report);
  // BENCHMARKS.md now holds figures the kept results do not: a render of them would put the old ones back.
  rmSync(RESULTS, { force: true });
  console.log([...claim, ...simulation].join("\n"));
}

/** The sealed-payloads section: each path's cost per message, sealed and clear, and the throughput ratio's median (range) over the pairs. */
function sealingMarkdown({ d1, sqlite }) {
  const lines = [];
  const table = tableInto(lines);
  const fmt = (n, digits = 2) => (n === undefined || n === null ? "–" : Number(n).toFixed(digits));
  const median = (values) => {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted.length % 2 ? sorted[(sorted.length - 1) / 2] : (sorted[sorted.length / 2 - 1] + sorted[sorted.length / 2]) / 2;
  };
  const spread = (values, digits) => `${fmt(median(values), digits)} (${fmt(Math.min(...values), digits)} – ${fmt(Math.max(...values), digits)})`;
  lines.push(
    "## Sealed payloads against clear ones",
    "",
    "Sign-up mails (`{to, name, template}`, about 90 bytes) with the outbox's key ring on",
    "(`OutboxBuilder::key_ring`, AES-256-GCM) and off, the same mails each time: **immediate** is",
    "one mail enqueued leased in its own batch, delivered at once and settled (two calls);",
    "**enqueue + drain** is mails enqueued 100 to a batch and drained by a no-op deliverer at batch",
    "100 (which checks each payload opened). With subjects (and dedup keys, hashed), a sealed mail",
    "has a data key of its own, a row written in its enqueue's batch and deleted with it (a",
    "trigger); without, it is sealed under the ring's key alone. Per message: the median of the",
    `pairs; msgs / s sealed ÷ clear: median (range) of the pairs' ratios (${SEAL_PAIRS} pairs after a warm-up`,
    `of each, the order swapped every pair; ${int(SEAL_MESSAGES)} mails a run on D1, ${int(MESSAGES)} natively).`,
    "",
  );
  const rows = [];
  for (const [backend, runs] of [["D1", d1], ["SQLite", sqlite]]) {
    if (!runs?.length) continue;
    for (const subjects of [true, false]) {
      const of = (sealed) => runs.filter((x) => x.run.sealed === sealed && x.run.subjects === subjects).sort((a, b) => a.repetition - b.repetition);
      for (const [path, parts] of [["immediate", ["immediate"]], ["enqueue + drain", ["enqueue", "drain"]]]) {
        const cost = (x, key) => parts.reduce((sum, part) => sum + (x.run[part].meter[key] ?? 0), 0) / x.run.messages;
        const speed = (x) => (x.run.messages / parts.reduce((sum, part) => sum + x.run[part].ms, 0)) * 1000;
        const perMessage = (key, digits) =>
          `${fmt(median(of(true).map((x) => cost(x, key))), digits)} / ${fmt(median(of(false).map((x) => cost(x, key))), digits)}`;
        const ratios = of(true).map((x, i) => speed(x) / speed(of(false)[i]));
        rows.push([
          backend,
          subjects ? "with" : "without",
          path,
          perMessage("calls", 4),
          backend === "D1" ? perMessage("rows_written", 2) : "–",
          backend === "D1" ? perMessage("rows_read", 2) : "–",
          `${fmt(median(of(true).map(speed)), 0)} / ${fmt(median(of(false).map(speed)), 0)}`,
          `**${spread(ratios.map((x) => 100 * x), 1)} %**`,
        ]);
      }
    }
  }
  table(
    ["backend", "subjects", "path", "calls / msg (sealed / clear)", "rows written / msg", "rows read / msg", "msgs / s", "sealed ÷ clear"],
    rows,
  );
  return lines;
}
