// The platform's own destinations: subrequests (binding calls) and D1
// queries per message for the e-mail, service-binding and Workflows
// deliverers, each draining its own outbox of N messages on local
// Miniflare with the real bindings. Driven by benches/run.mjs, whose Queue
// relay and HTTP rows stand beside these in one table (benches/queues.mjs).
import { Log, LogLevel } from "miniflare";
import { startPlatform } from "../tests/e2e/platform_workers.mjs";

// Miniflare's log: one line naming an .eml file per mail the binding took.
class Mails extends Log {
  sent = 0;
  logWithLevel(level, message) {
    this.sent += [...message.matchAll(/\.eml\b/g)].length;
  }
}

/**
 * Drains `messages` messages through each platform deliverer. Binding calls:
 * a mail is counted by Miniflare's log, a service request by the other
 * Worker, a Workflow's `create` and `get` by the test Worker's proxy.
 */
export async function runPlatform(log, { messages = 200 } = {}) {
  const mails = new Mails(LogLevel.INFO);
  const mf = await startPlatform(mails);
  const seen = async () => (await (await (await mf.getWorker("billing")).fetch("http://billing/__seen")).json()).length;
  try {
    const rows = {};
    for (const kind of ["email", "service", "workflow"]) {
      const before = { mails: mails.sent, requests: await seen() };
      const response = await mf.dispatchFetch(`http://main/platform/bench/${kind}?count=${messages}`, { method: "POST" });
      const body = await response.text();
      if (response.status !== 200) throw new Error(`${kind}: ${body}`);
      const result = JSON.parse(body);
      if (result.delivered !== messages) throw new Error(`${kind}: ${result.delivered} of ${messages} delivered`);
      if (kind === "email") result.calls = mails.sent - before.mails;
      if (kind === "service") result.calls = (await seen()) - before.requests;
      log(`${kind}: ${result.calls} binding calls, ${result.queries} D1 queries for ${messages} messages, ${result.wall_ms} ms`);
      rows[kind] = { ...result, perSecond: (messages / result.wall_ms) * 1000 };
    }
    return rows;
  } finally {
    await mf.dispose();
  }
}
