// The large fault simulation (tests/simulation) on SQLite and on Postgres,
// side by side: the same seeded world against each database.
import { execFileSync } from "node:child_process";
import { int, tableInto } from "./markdown.mjs";

/** Runs the large world on both engines (`cargo test --release --test simulation -- --ignored`). */
export function runSimulation(root, log) {
  const runs = [];
  for (const engine of ["sqlite", "postgres"]) {
    log(`fault simulation (large world) on ${engine}`);
    const out = execFileSync(
      "cargo",
      ["test", "--release", "-q", "--test", "simulation", "--", "--ignored", "--nocapture", "a_large_world"],
      {
        cwd: root,
        encoding: "utf8",
        env: { ...process.env, SIM_DATABASE: engine },
        stdio: ["ignore", "pipe", "inherit"],
        maxBuffer: 16 * 1024 * 1024,
      },
    );
    const line = out.split("\n").find((l) => l.startsWith("SIM_FIGURES_JSON "));
    if (!line) throw new Error(`the simulation on ${engine} printed no figures:\n${out}`);
    runs.push(JSON.parse(line.slice("SIM_FIGURES_JSON ".length)));
  }
  return runs;
}

/** The report's section. */
export function simulationMarkdown(runs) {
  const lines = [];
  const table = tableInto(lines);
  const [sqlite, postgres] = runs.map((run) => run.figures);
  const rows = [
    ["messages", (f) => f.messages],
    ["drainers", (f) => f.drainers],
    ["simulated seconds", (f) => f.simulated_seconds],
    ["database errors before commit / after commit", (f) => `${int(f.faults.db_errors_before)} / ${int(f.faults.db_errors_after_commit)}`],
    ["drainer crashes after claim / after delivery", (f) => `${f.faults.crashes_after_claim} / ${f.faults.crashes_after_delivery}`],
    ["deliveries past their lease", (f) => f.faults.overruns],
    ["retryable / permanent failures", (f) => `${int(f.faults.retryable_failures)} / ${f.faults.permanent_failures}`],
    ["poison crashes", (f) => f.faults.poison_crashes],
    ["failures during the 2-hour outage", (f) => int(f.faults.outage_failures)],
    ["throttled (429) / hung deliveries", (f) => `${int(f.faults.throttled)} / ${f.faults.hangs}`],
    ["delivered / dead", (f) => `${int(f.delivered)} / ${f.dead}`],
    ["**lost**", (f) => `**${f.lost}**`],
    ["**concurrent double deliveries**", (f) => `**${f.concurrent_double_deliveries}**`],
    ["**stale settles applied**", (f) => `**${f.stale_settles_applied}**`],
    ["**effects applied twice**", (f) => `**${f.effects_applied_twice}**`],
    ["attempts over the maximum / order violations", (f) => `${f.attempts_over_max} / ${f.order_violations}`],
    ["innocent messages dead (of an unknown outcome)", (f) => `${f.innocent_dead} (${f.innocent_dead_unsettled})`],
    ["poison dead after (attempts)", (f) => f.poison_dead_after ?? "–"],
    ["attempts spent during the outage (poison aside)", (f) => `**${f.outage_attempts}**`],
    ["rollups against the database's audit: differences / changes", (f) => `**${f.rollup_differences.length}** / ${int(f.audited_changes)}`],
  ];
  const same = JSON.stringify(sqlite) === JSON.stringify(postgres);
  lines.push(
    "## The fault simulation on SQLite and on Postgres",
    "",
    "The large seeded world of `tests/simulation` (`cargo test --release --test simulation -- --ignored`,",
    "`SIM_DATABASE=sqlite|postgres`): drainers crash after claiming or delivering, 5% of database",
    "calls fail (a quarter after committing), deliveries fail, overrun their lease or hang, the clock",
    "jumps; one poison message kills its drainer every time, two 429 storms and a 2-hour outage.",
    "On Postgres each database call is answered by the real server before the world moves on, so the",
    "world stays one thread on one clock and the seed replays the same calls.",
    "",
  );
  table(
    ["figure", "SQLite (in memory)", "Postgres (server)"],
    [
      ...rows.map(([name, get]) => [name, get(sqlite), get(postgres)]),
      ["wall time (s)", runs[0].wall_s.toFixed(1), runs[1].wall_s.toFixed(1)],
      ["every promise kept", runs[0].kept ? "yes" : "**no**", runs[1].kept ? "yes" : "**no**"],
    ],
  );
  lines.push(
    same
      ? "Every figure is equal on both: the same seeded world, figure for figure, on either database."
      : "**The figures differ between the two databases**: the same seed did not replay the same world.",
    "",
  );
  return lines;
}
