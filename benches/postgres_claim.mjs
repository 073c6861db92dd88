// The Postgres claim without tuning: the claim floor (this tree) beside the
// schema before it (BASELINE_COMMIT, built by scripts/bench.sh from the same
// benchmark source), at the server's default autovacuum naptime and at 1 s,
// under a snapshot held open for 60 s, and over a 1,000,000-message soak.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { int, tableInto } from "./markdown.mjs";

/** The commit whose Postgres schema and claim are "before": 0.5 with the console, no floor. */
export const BASELINE_COMMIT = "0ccfb06";

const NAPTIME_MESSAGES = Number(process.env.BENCH_PG_MESSAGES ?? 100_000);
const NAPTIME_REPS = Number(process.env.BENCH_PG_REPS ?? 9);
const STEADY_MESSAGES = Number(process.env.BENCH_PG_STEADY_MESSAGES ?? 1_000_000);
const SNAPSHOT_RATE = Number(process.env.BENCH_PG_SNAPSHOT_RATE ?? 10_000);
const SOAK_RATE = Number(process.env.BENCH_PG_SOAK_RATE ?? 5_000);
const HOLD_FROM_S = Number(process.env.BENCH_PG_HOLD_FROM ?? 20);
const HOLD_FOR_S = Number(process.env.BENCH_PG_HOLD_FOR ?? 60);
const MOST_S = Number(process.env.BENCH_PG_MOST ?? 300);
const DRAINERS = 4;

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const range = (xs) => [Math.min(...xs), Math.max(...xs)];

/** Runs every Postgres claim benchmark on both builds. */
export function runPostgresClaim(root, log) {
  const url = process.env.WORKERS_OUTBOX_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:54329/postgres";
  const builds = {
    floor: path.join(root, "target/release/outbox-bench-postgres-claim"),
    before: path.join(root, `target/baseline-${BASELINE_COMMIT}/release/outbox-bench-postgres-claim`),
  };
  const run = (schema, args) => {
    log(`postgres claim (${schema}): ${args.join(" ")}`);
    return JSON.parse(
      execFileSync(builds[schema], [args[0], url, ...args.slice(1).map(String)], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "inherit"],
        maxBuffer: 64 * 1024 * 1024,
      }),
    );
  };
  const result = { naptime: {}, snapshot: {}, soak: {} };
  for (const schema of ["before", "floor"]) {
    result.naptime[schema] = run(schema, ["naptime", NAPTIME_MESSAGES, DRAINERS, NAPTIME_REPS]);
  }
  for (const schema of ["before", "floor"]) {
    result.snapshot[schema] = run(schema, ["snapshot", STEADY_MESSAGES, DRAINERS, SNAPSHOT_RATE, MOST_S, HOLD_FROM_S, HOLD_FOR_S]);
    result.soak[schema] = run(schema, ["soak", STEADY_MESSAGES, DRAINERS, SOAK_RATE, MOST_S]);
  }
  return result;
}

/** Rates per phase of a held-snapshot run: before, during, and after the hold. */
export function snapshotPhases(run) {
  const from = run.hold_from_s;
  const to = from + run.hold_for_s;
  const rate = (a, b) => {
    const seconds = run.series.filter((s) => s.t > a && s.t <= b);
    return seconds.length ? seconds.reduce((sum, s) => sum + s.delivered, 0) / seconds.length : null;
  };
  // "Before" skips the first 5 s (the drainers and the producer starting).
  const before = rate(5, from);
  const during = rate(from, to);
  // Back to the full rate: the first second after the hold whose deliveries
  // reach 90% of the rate before it (or the backlog is gone).
  const back = run.series.find((s) => s.t > to && (s.delivered >= 0.9 * before || s.backlog < 0.05 * run.rate));
  return { before, during, after: rate(to, to + 10), backSeconds: back ? back.t - to : null };
}

/** The report's section. */
export function postgresClaimMarkdown(r) {
  const lines = [];
  const table = tableInto(lines);
  const pct = (x) => `${(100 * x).toFixed(1)}%`;
  lines.push(
    "## Postgres without tuning: the claim floor beside the schema before it",
    "",
    "Native Postgres (`scripts/postgres.sh`: Debian's server, default settings but for",
    "`shared_buffers`), 4 drainers of 2 connections each, no-op delivery, batch 100. **Before** is",
    `the outbox at commit \`${BASELINE_COMMIT}\` (0.5's schema: each claim walks the due index from its`,
    "start, past every entry earlier leases and deletes left until vacuum removes them); **floor** is",
    "this tree (claims start at the claim floor, `src/sql/postgres/claim_floor.rs`). Both run the same",
    "benchmark source (`benches/outbox-bench/src/bin/postgres_claim.rs`), built against each.",
    "",
    `### A backlog of ${int(r.naptime.floor.messages)} messages at autovacuum's default naptime (60 s) and at 1 s`,
    "",
    `${r.naptime.floor.runs.length / 2} repetitions of each pair, the order swapped every repetition: median (range) of`,
    "the runs, and of each repetition's ratio default ÷ 1 s.",
    "",
  );
  const naptimeRows = [];
  const summary = {};
  for (const schema of ["before", "floor"]) {
    const runs = r.naptime[schema].runs;
    const of = (naptime) => runs.filter((x) => (naptime === "1s" ? x.naptime === "1s" : x.naptime !== "1s"));
    const fmt = (xs) => {
      const [lo, hi] = range(xs);
      return `${int(median(xs))} (${int(lo)} – ${int(hi)})`;
    };
    const def = of("default").map((x) => x.per_second);
    const tuned = of("1s").map((x) => x.per_second);
    const ratios = of("default").map((x) => x.per_second / of("1s").find((y) => y.repetition === x.repetition).per_second);
    const [lo, hi] = range(ratios);
    summary[schema] = { def: median(def), tuned: median(tuned), ratio: median(ratios) };
    naptimeRows.push([
      schema === "floor" ? "**floor**" : "before",
      fmt(def),
      fmt(tuned),
      `**${pct(median(ratios))}** (${pct(lo)} – ${pct(hi)})`,
    ]);
  }
  table(["schema", "msgs / s, default naptime", "msgs / s, naptime 1 s", "default ÷ 1 s"], naptimeRows);
  lines.push(
    `At the default naptime the floor drains ${(summary.floor.def / summary.before.def).toFixed(1)}× as fast as before`,
    `(medians); with a naptime of 1 s, ${(summary.floor.tuned / summary.before.tuned).toFixed(2)}×.`,
    "",
    `### A snapshot held for ${HOLD_FOR_S} s`,
    "",
    `${int(r.snapshot.floor.messages)} messages enqueued at ${int(r.snapshot.floor.rate)} a second (100 per 10 ms; the producer shares`,
    `the machine, so it falls short of that) while 4 drainers deliver them; from second ${HOLD_FROM_S} to`,
    `${HOLD_FROM_S + HOLD_FOR_S} a repeatable-read transaction holds its snapshot (\`SELECT count(*)\`), as a report or a`,
    "backup would: vacuum can remove nothing deleted meanwhile, and no index entry can be marked dead.",
    "Deliveries a second, averaged per phase; the backlog is enqueued − delivered.",
    "",
  );
  const phaseRows = [];
  for (const schema of ["before", "floor"]) {
    const run = r.snapshot[schema];
    const p = snapshotPhases(run);
    const maxBacklog = Math.max(...run.series.map((s) => s.backlog));
    phaseRows.push([
      schema === "floor" ? "**floor**" : "before",
      int(p.before),
      `${int(p.during)} (**${p.before ? pct(p.during / p.before) : "–"}**)`,
      int(p.after),
      p.backSeconds === null ? "not within the run" : `**${p.backSeconds} s**`,
      int(maxBacklog),
      run.finished ? `${(run.wall_ms / 1000).toFixed(0)} s` : `stopped at ${(run.wall_ms / 1000).toFixed(0)} s, ${int(run.delivered)} delivered`,
    ]);
  }
  table(["schema", "before the hold", "during it (of before)", "10 s after it", "back to the full rate after", "largest backlog", "run"], phaseRows);
  lines.push("Deliveries a second, in 5-second steps (the hold is marked):", "");
  const steps = [];
  const longest = Math.max(r.snapshot.before.series.length, r.snapshot.floor.series.length);
  for (let t = 5; t <= longest + 4; t += 5) {
    const at = (schema) => {
      const seconds = r.snapshot[schema].series.filter((s) => s.t > t - 5 && s.t <= t);
      return seconds.length ? int(seconds.reduce((sum, s) => sum + s.delivered, 0) / seconds.length) : "–";
    };
    const held = t > HOLD_FROM_S && t - 5 < HOLD_FROM_S + HOLD_FOR_S;
    steps.push([`${t - 5}–${t} s${held ? " (held)" : ""}`, at("before"), at("floor")]);
  }
  table(["seconds", "before", "floor"], steps);
  lines.push(
    `### A soak: ${int(r.soak.floor.messages)} messages at ${int(r.soak.floor.rate)} a second`,
    "",
    "The server's default settings, no snapshot held. A claim call is one transaction: the previous",
    "batch's settles, the claim (and, with the floor, its two steps). Its latency per tenth of the",
    "run; the table's size once every message is delivered (deleted), before any vacuum of it",
    "that the run did not trigger itself.",
    "",
  );
  const soakRows = [];
  for (const schema of ["before", "floor"]) {
    const run = r.soak[schema];
    const first = run.tenths[0];
    const last = run.tenths[9];
    const mib = (b) => (b / 2 ** 20).toFixed(1);
    soakRows.push([
      schema === "floor" ? "**floor**" : "before",
      `${first.p50_ms.toFixed(2)} / ${first.p99_ms.toFixed(2)}`,
      `${last.p50_ms.toFixed(2)} / ${last.p99_ms.toFixed(2)}`,
      `**${(last.p99_ms / first.p99_ms).toFixed(2)}×**`,
      `${mib(run.heap_bytes)} / ${mib(run.index_bytes)} / ${mib(run.total_bytes)}`,
      `${int(run.dead_tuples)} / ${run.autovacuums ?? "–"}`,
      run.finished ? `${(run.wall_ms / 1000).toFixed(0)} s` : `stopped at ${(run.wall_ms / 1000).toFixed(0)} s, ${int(run.delivered)} delivered`,
    ]);
  }
  table(
    ["schema", "claim ms p50 / p99, first tenth", "last tenth", "p99 last ÷ first", "heap / indexes / total MiB at the end", "dead tuples / autovacuums", "run"],
    soakRows,
  );
  lines.push(
    "p99 per tenth, floor:",
    r.soak.floor.tenths.map((t) => t.p99_ms.toFixed(1)).join(" · ") + " ms; before: " +
      r.soak.before.tenths.map((t) => t.p99_ms.toFixed(1)).join(" · ") + " ms.",
    "",
  );
  return lines;
}
