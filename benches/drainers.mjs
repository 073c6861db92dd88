// Concurrent drainers on one backlog: native Postgres (FOR UPDATE SKIP
// LOCKED) beside native SQLite, through `outbox-bench-drainers`.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { int, tableInto } from "./markdown.mjs";

const MESSAGES = Number(process.env.BENCH_DRAINER_MESSAGES ?? 100_000);
const COUNTS = [1, 2, 4, 8];

/** Runs the drainer benchmark; needs the Postgres server of `scripts/postgres.sh`. */
export function runDrainers(root, log) {
  const url = process.env.WORKERS_OUTBOX_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:54329/postgres";
  log(`concurrent drainers: ${MESSAGES} messages, ${COUNTS.join("/")} drainers, Postgres and SQLite`);
  return JSON.parse(
    execFileSync(
      path.join(root, "target/release/outbox-bench-drainers"),
      [String(MESSAGES), url, ...COUNTS.map(String)],
      { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], maxBuffer: 16 * 1024 * 1024 },
    ),
  );
}

/**
 * Rollups on and off on Postgres with 4 drainers, side by side: a warm-up of
 * each and PAIRS pairs, the order swapped every pair.
 */
export function runRollupPairs(root, log) {
  const url = process.env.WORKERS_OUTBOX_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:54329/postgres";
  const pairs = Number(process.env.BENCH_PG_ROLLUP_PAIRS ?? 7);
  log(`Postgres rollups on and off: ${MESSAGES} messages, 4 drainers, ${pairs} pairs`);
  return JSON.parse(
    execFileSync(path.join(root, "target/release/outbox-bench-drainers"), [String(MESSAGES), url], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, OUTBOX_BENCH_ROLLUP_PAIRS: String(pairs), OUTBOX_BENCH_ROLLUP_DRAINERS: "4" },
      maxBuffer: 16 * 1024 * 1024,
    }),
  );
}

/** The report's section of `runRollupPairs`. */
export function rollupPairsMarkdown(r) {
  const lines = [];
  const table = tableInto(lines);
  const fmt = (n, digits) => Number(n).toFixed(digits);
  const median = (values) => {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted[Math.floor(sorted.length / 2)];
  };
  const ratios = r.pairs.map((pair) => pair.on.per_second / pair.off.per_second);
  const speeds = (key) => r.pairs.map((pair) => pair[key].per_second);
  lines.push(
    "## Postgres: rollups on and off with 4 drainers",
    "",
    `The drain above (${int(r.messages)} messages, ${r.drainers} drainers, the server's default naptime) with the`,
    `outbox's rollups on and off: a warm-up of each, then ${r.pairs.length} pairs whose order swaps every pair.`,
    "Messages a second: median (range) of the runs; on ÷ off: median (range) of the pairs' ratios.",
    "",
  );
  table(
    ["rollups", "messages / s", "database calls / message", "statements / message"],
    ["on", "off"].map((key) => [
      key,
      `${int(median(speeds(key)))} (${int(Math.min(...speeds(key)))} – ${int(Math.max(...speeds(key)))})`,
      fmt(median(r.pairs.map((pair) => pair[key].calls_per_message)), 4),
      fmt(median(r.pairs.map((pair) => pair[key].statements / pair[key].delivered)), 3),
    ]),
  );
  lines.push(
    `**On ÷ off: ${fmt(100 * median(ratios), 1)} % (${fmt(100 * Math.min(...ratios), 1)} – ${fmt(100 * Math.max(...ratios), 1)})**.`,
    "",
  );
  return lines;
}

/** The report's section. */
export function drainersMarkdown(r) {
  const lines = [];
  const table = tableInto(lines);
  const fmt = (n, digits) => Number(n).toFixed(digits);
  lines.push(
    "## Concurrent drainers: Postgres beside SQLite (native)",
    "",
    `A backlog of ${int(r.messages)} messages drained by 1, 2, 4 and 8 drainers at once, each with`,
    "connections of its own (Postgres: a pool of 2; SQLite: its own connection to one WAL file), no-op",
    "delivery, batch 100, the scheduled limits otherwise. Postgres claims with `FOR UPDATE SKIP",
    "LOCKED`, so drainers never wait on each other's rows; SQLite serializes every writer. Wall time",
    "runs from the drainers' start until the last one finds nothing due. Postgres is the",
    "`scripts/postgres.sh` server on loopback with default durability (fsync on); overlaps count a",
    "message delivered while another drainer held it, duplicates any second delivery.",
    "",
  );
  table(
    ["engine", "autovacuum naptime", "drainers", "messages / s", "database calls / message", "statements / message", "per drainer", "overlaps", "duplicates", "left"],
    r.runs.map((run) => [
      run.engine === "postgres" ? "Postgres" : "SQLite",
      run.naptime ?? "–",
      run.drainers,
      `**${int(run.per_second)}**`,
      fmt(run.calls_per_message, 4),
      fmt(run.statements / run.delivered, 3),
      run.per_drainer.map(int).join(" / "),
      run.overlaps,
      run.duplicates,
      run.left,
    ]),
  );
  lines.push(
    "**Autovacuum.** A claim walks the due index from its start, past the entries its predecessors",
    "left behind (a leased row moves in the index; a delivered one is deleted) until vacuum removes",
    "them: with the server's default `autovacuum_naptime` of 60 s, a burst of this size drains",
    "before vacuum first runs, and each claim walks further than the last. The outbox table's",
    "schema asks autovacuum to visit it after 2,000 dead rows; a server that runs queues sets the",
    "naptime low (1 s here) so that it can. Both are measured above.",
    "",
    "A settle is one statement per message (a fenced `DELETE`), sent in the same transaction as the",
    "next claim; the Postgres adapter pipelines a transaction's statements, so a call costs three",
    "round trips (`BEGIN`, the statements, `COMMIT`) whatever its length. On this 2-core machine the server, the drainers and the",
    "benchmark share both cores: the figures measure the outbox's bookkeeping and its contention,",
    "not a tuned server.",
    "",
  );
  return lines;
}
