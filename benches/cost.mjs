// What a message costs in the rows D1 bills, on each path, ours (rollups on
// and off) beside the original algorithm, and what that means on D1's
// plans: messages a day within the free plan, and the list price of a
// million messages on the paid plan.
import { int, tableInto } from "./markdown.mjs";
import { PREVIOUS, previousCost } from "./previous.mjs";

/** D1's Workers Free plan: rows a day. */
export const FREE_PLAN = { rowsWritten: 100_000, rowsRead: 5_000_000 };
/** D1's Workers Paid plan: list price per million rows, past what the plan includes. */
export const PAID_PRICE = { rowsWritten: 1.0, rowsRead: 0.001 };

/**
 * Each path's figures, per message (per event when fanned out): `call` is
 * the bench Worker's, `previousCall` the previous version's (`previous.mjs`);
 * ours with the rollups on and off, the original, then the previous version
 * on the paths it has.
 */
export async function runCost(call, previousCall, log, messages = 2_000) {
  const paths = [];
  for (const rollups of [true, false]) {
    const { body } = await call("cost", { rollups, messages });
    paths.push(...body);
  }
  paths.push(...(await call("cost_original", { messages })).body);
  paths.push(...(await previousCost(previousCall, messages)));
  for (const path of paths) {
    const p = perMessage(path);
    log(
      `D1 cost ${label(path)} ${path.path}: ` +
        `${p.written.toFixed(2)} written, ${p.read.toFixed(2)} read per ${path.path.startsWith("fanned") ? "event" : "message"}`,
    );
  }
  return { messages, paths };
}

/** Whose figures a path's are. */
function label(path) {
  switch (path.algorithm) {
    case "ours":
      return path.rollups ? "ours, rollups on" : "ours, rollups off";
    case "previous":
      return PREVIOUS.name;
    default:
      return "original";
  }
}

/** A path's rows written and read per message: its enqueue's and its delivery's. */
export function perMessage(path) {
  const per = (key) => (path.enqueue[key] + path.deliver[key]) / Math.max(1, path.messages);
  return { written: per("rows_written"), read: per("rows_read") };
}

/** Messages a day the free plan's rows allow, and the one that runs out first. */
export function freePlanMessages({ written, read }) {
  const byWritten = FREE_PLAN.rowsWritten / written;
  const byRead = read > 0 ? FREE_PLAN.rowsRead / read : Infinity;
  return byWritten <= byRead ? { messages: byWritten, limit: "writes" } : { messages: byRead, limit: "reads" };
}

/** The paid plan's list price of a million messages' rows, in dollars. */
export function pricePerMillion({ written, read }) {
  return written * PAID_PRICE.rowsWritten + read * PAID_PRICE.rowsRead;
}

/** The BENCHMARKS.md section. */
export function costMarkdown({ messages, paths }) {
  const lines = [];
  const table = tableInto(lines);
  const fmt = (x, digits) => x.toFixed(digits);
  lines.push(
    "## What a message costs on D1",
    "",
    `Rows D1 bills per message (per event when fanned out), enqueue and delivery together, ${int(messages)} messages`,
    "a path, measured in Miniflare's D1 (`BENCH_ONLY=cost node benches/run.mjs`). **immediate**: enqueued",
    "leased in its business batch and settled at once (the `wait_until` attempt); **drained**: enqueued 100",
    "to a batch, drained at batch 100; **relayed**: the same through a batch deliverer, as the Queue relay",
    "(one `send_batch` per 100: the Queue's own operations are billed by Queues, not D1); **fanned out to N**:",
    "one event a batch, which N endpoints subscribe to, and its N deliveries drained. The original algorithm",
    "is `shared/reference/outbox.rs` on the same adapter (`benches/outbox-bench/src/baseline.rs`): an insert,",
    "a select and a guarded update per row to claim, a delete per row; it keeps no rollups. The",
    `${PREVIOUS.name} is its own bench Worker, built from that commit by the same run (\`benches/previous.mjs\`),`,
    "its sign-up mails through the same immediate and drained paths with its defaults (rollups on); it had",
    "no route that meters a relay or a fanned-out delivery.",
    `Free plan: ${int(FREE_PLAN.rowsWritten)} rows written and ${int(FREE_PLAN.rowsRead)} rows read a day; paid plan:`,
    `$${fmt(PAID_PRICE.rowsWritten, 2)} per million rows written and $${fmt(PAID_PRICE.rowsRead, 3)} per million read past the included`,
    "(the Worker's own requests and CPU not counted).",
    "",
  );
  const order = ["immediate", "drained", "relayed"];
  const rank = (path) => (order.includes(path.path) ? order.indexOf(path.path) : order.length + Number(path.path.replace(/\D/g, "")));
  const sorted = [...paths].sort((a, b) => rank(a) - rank(b) || label(a).localeCompare(label(b)));
  table(
    ["path", "algorithm", "rows written / msg", "rows read / msg", "messages a day on the free plan", "$ per million messages"],
    sorted.map((path) => {
      const p = perMessage(path);
      const free = freePlanMessages(p);
      return [
        path.path,
        label(path),
        fmt(p.written, 2),
        fmt(p.read, 2),
        `${int(free.messages)} (${free.limit})`,
        `$${fmt(pricePerMillion(p), 2)}`,
      ];
    }),
  );
  return lines;
}
