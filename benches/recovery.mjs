// Recovery after a drain dies mid-run and after a long outage, on native
// SQLite with a manual clock (benches/outbox-bench/src/bin/recovery.rs):
// today's rules (suspects in halving groups, held messages released when
// their receiver answers) beside the library at BASELINE_COMMIT (suspects
// one at a time, held messages waiting out their backoff), both built from
// the same benchmark source by scripts/bench.sh.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { int, tableInto } from "./markdown.mjs";

/** The library before suspect groups and held releases. */
export const BASELINE_COMMIT = "8f3e12b";

const SUSPECTS = [100, 1_000];

/** Runs every recovery scenario on both builds. */
export function runRecovery(root, log) {
  const builds = {
    ours: path.join(root, "target/release/outbox-bench-recovery"),
    before: path.join(root, `target/baseline-${BASELINE_COMMIT}/release/outbox-bench-recovery`),
  };
  const run = (build, args) => {
    log(`recovery (${build}): ${args.join(" ")}`);
    return JSON.parse(execFileSync(builds[build], args.map(String), { encoding: "utf8" }));
  };
  const suspects = [];
  for (const n of SUSPECTS) {
    for (const poison of [0, 1]) {
      suspects.push({ n, poison, ours: run("ours", ["suspects", n, poison]), before: run("before", ["suspects", n, poison]) });
    }
  }
  return { suspects, outage: { ours: run("ours", ["outage"]), before: run("before", ["outage"]) } };
}

/** The report's section. */
export function recoveryMarkdown(r) {
  const lines = [];
  const table = tableInto(lines);
  const fmt = (n, digits = 1) => n.toFixed(digits);
  lines.push(
    "## Recovery: a drain that died, and a receiver back after an outage",
    "",
    `Native SQLite on a manual clock: a delivery takes 250 ms, a drain runs once a minute with`,
    "`DrainLimits::scheduled()` (6 in flight, leases of 60 s, 45 s deadline). *Ours* is this",
    `commit; *before* is the same benchmark source built against \`${BASELINE_COMMIT}\` (suspects`,
    "delivered one at a time; held messages waiting out their backoff).",
    "",
    "**Suspects.** A drain leased N messages and died (a deploy, an eviction); with poison 1, one",
    "of them crashes every drain that delivers it. Drains, database calls and seconds from the",
    "death until every other message was delivered (the first lease's 60 s included), and",
    "attempts an innocent message lost to crashes.",
    "",
  );
  table(
    ["suspects", "poison", "drains (ours / before)", "database calls (ours / before)", "seconds (ours / before)", "crashes (ours / before)", "innocent attempts lost (ours / before)"],
    r.suspects.map(({ n, poison, ours, before }) => [
      int(n),
      poison,
      `${ours.drains} / ${before.drains}`,
      `${int(ours.calls)} / ${int(before.calls)}`,
      `${fmt(ours.seconds)} / ${fmt(before.seconds)}`,
      `${ours.crashes} / ${before.crashes}`,
      `${ours.innocent_attempts_lost} / ${before.innocent_attempts_lost}`,
    ]),
  );
  const { ours, before } = r.outage;
  lines.push(
    `**Outage.** ${int(ours.messages)} messages, a receiver answering 503 for 2 hours, then well;`,
    "minutes from its recovery to the last delivery.",
    "",
  );
  table(
    ["", "minutes after recovery", "drains", "database calls", "attempts spent"],
    [
      ["ours", fmt(ours.minutes_after_recovery, 2), ours.drains, int(ours.calls), ours.attempts_spent],
      ["before", fmt(before.minutes_after_recovery, 2), before.drains, int(before.calls), before.attempts_spent],
    ],
  );
  return lines;
}
