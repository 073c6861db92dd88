// What endpoints cost on D1 (benches/outbox-bench/src/endpoint_costs.rs, in
// the benchmark Worker): one event fanned out to 1, 10 and 100 endpoints
// inside the business batch, beside the same batch without it; and the
// attempt log's writes on a drain whose every attempt fails, logged
// (failures only, the default) against not logged, in repeated pairs.
import { int, tableInto } from "./markdown.mjs";

const FAN_OUT = [1, 10, 100];
const FAN_OUT_ITERATIONS = Number(process.env.BENCH_FAN_OUT_ITERATIONS ?? 50);
const FAILING_MESSAGES = Number(process.env.BENCH_FAILING_MESSAGES ?? 10_000);
const FAILING_PAIRS = Number(process.env.BENCH_FAILING_PAIRS ?? 5);

/** Runs the fan-out sizes and the failing drains through the Worker's routes. */
export async function runEndpoints(call, log) {
  const fanOut = [];
  for (const endpoints of FAN_OUT) {
    const { body } = await call("fan_out", { endpoints, iterations: FAN_OUT_ITERATIONS });
    log(`fan-out to ${endpoints}: ${body.deliveries_per_event} deliveries, ${body.with_event.rows_written} rows written`);
    fanOut.push(body);
  }
  const failing = async (logged) => (await call("failing_drain", { logged, messages: FAILING_MESSAGES })).body;
  // A warm-up of each, then pairs whose order swaps every repetition.
  for (const logged of [true, false]) await failing(logged);
  const pairs = [];
  for (let repetition = 0; repetition < FAILING_PAIRS; repetition++) {
    const order = repetition % 2 === 0 ? [true, false] : [false, true];
    const pair = {};
    for (const logged of order) pair[logged ? "on" : "off"] = await failing(logged);
    log(`failing drain pair ${repetition}: on ${pair.on.elapsed_ms.toFixed(0)} ms, off ${pair.off.elapsed_ms.toFixed(0)} ms`);
    pairs.push(pair);
  }
  return { fanOut, pairs };
}

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length / 2;
  return sorted.length % 2 ? sorted[(sorted.length - 1) / 2] : (sorted[mid - 1] + sorted[mid]) / 2;
};
const spread = (values, digits) =>
  `${median(values).toFixed(digits)} (${Math.min(...values).toFixed(digits)} – ${Math.max(...values).toFixed(digits)})`;

/** The report's section. */
export function endpointsMarkdown(r) {
  const lines = [];
  const table = tableInto(lines);
  lines.push(
    "## Endpoints: one event fanned out inside the business batch (D1)",
    "",
    `An account insert alone, and the same batch with one \`Batch::publish\` of an event that N`,
    `endpoints of its owner subscribe to (the event row and one delivery row per endpoint, written`,
    `by an \`INSERT … SELECT\` in the same atomic call). Means of ${FAN_OUT_ITERATIONS} batches each; rows written`,
    "include index entries, as D1 bills them.",
    "",
  );
  table(
    ["endpoints", "deliveries / event", "D1 calls / batch", "statements added", "rows written added", "rows read added", "batch ms alone", "batch ms with the event", "ms added"],
    r.fanOut.map((x) => {
      const n = x.iterations;
      const added = (key) => (x.with_event[key] - x.alone[key]) / n;
      return [
        x.endpoints,
        x.deliveries_per_event,
        (x.with_event.calls / n).toFixed(2),
        added("statements").toFixed(1),
        added("rows_written").toFixed(1),
        added("rows_read").toFixed(1),
        x.alone_ms.toFixed(2),
        x.with_event_ms.toFixed(2),
        (x.with_event_ms - x.alone_ms).toFixed(2),
      ];
    }),
  );
  const of = (side) => r.pairs.map((pair) => pair[side]);
  const perSecond = (x) => (x.attempts / x.elapsed_ms) * 1000;
  const rowsPerAttempt = (x) => x.meter.rows_written / x.attempts;
  const logCost = r.pairs.map((pair) => rowsPerAttempt(pair.on) - rowsPerAttempt(pair.off));
  lines.push(
    "## The attempt log's cost (D1)",
    "",
    `A drain of ${int(FAILING_MESSAGES)} due messages (batch 100) whose every attempt fails for good (a \`400\`), so`,
    "each attempt is logged under the default `AttemptLog::Failures`: logged (status, content type,",
    "a 68-byte body) against not logged (`AttemptLog::Off`). A warm-up run of each, then",
    `${FAILING_PAIRS} pairs whose order swaps every repetition; median (range). The log's rows are written`,
    "in the settle call the drain makes anyway: the calls per attempt do not change.",
    "",
  );
  table(
    ["attempt log", "D1 calls / attempt", "rows written / attempt", "attempts / s"],
    [
      ["failures (default)", spread(of("on").map((x) => x.meter.calls / x.attempts), 4), spread(of("on").map(rowsPerAttempt), 2), spread(of("on").map(perSecond), 0)],
      ["off", spread(of("off").map((x) => x.meter.calls / x.attempts), 4), spread(of("off").map(rowsPerAttempt), 2), spread(of("off").map(perSecond), 0)],
      [
        "**on / off**",
        "",
        `+${spread(logCost, 2)} rows / attempt`,
        `**${spread(r.pairs.map((pair) => (100 * perSecond(pair.on)) / perSecond(pair.off)), 1)} %**`,
      ],
    ],
  );
  return lines;
}
