// The outbox's promise on D1 inside workerd: 1,000 sign-ups through the
// example Worker, a mail API that fails 30% of the time and sometimes hangs
// past the lease, overlapping cron drains beside the wait_until attempts.
// Afterwards every mail reached the API and the outbox is empty.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { eventually, outboxCounts, start } from "./harness.mjs";

const SIGNUPS = Number(process.env.RELIABILITY_SIGNUPS ?? 1000);
const TOKEN = "reliability-token";

/** A seeded generator (mulberry32), so a run can be repeated. */
function random(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("reliability on D1", () => {
  it(`delivers every one of ${SIGNUPS} sign-up mails through failures, hangs and overlapping drains`, async () => {
    const seed = Number(process.env.RELIABILITY_SEED ?? 42);
    const chance = random(seed);
    const figures = { requests: 0, refused: 0, hung: 0, accepted: 0 };
    const accepted = new Map();
    const sink = async (request) => {
      await request.json();
      figures.requests += 1;
      const roll = chance();
      if (roll < 0.05) {
        // Hang past the lease, then accept: the outbox has given up by then.
        figures.hung += 1;
        await new Promise((resolve) => setTimeout(resolve, 900));
      } else if (roll < 0.35) {
        figures.refused += 1;
        return new Response("busy", { status: 503 });
      }
      figures.accepted += 1;
      const id = request.headers.get("idempotency-key");
      accepted.set(id, (accepted.get(id) ?? 0) + 1);
      return new Response("{}", { status: 202 });
    };
    const mf = await start("examples/signup-mail", {
      bindings: {
        MAIL_API_URL: "https://mail.test/send",
        ADMIN_TOKEN: TOKEN,
        DELIVERY_TIMEOUT_MS: "250",
        SETTLE_MARGIN_MS: "100",
        LEASE_MS: "800",
        BACKOFF_BASE_MS: "20",
        BACKOFF_CAP_MS: "200",
        MAX_ATTEMPTS: "60",
        DRAIN_BATCH_SIZE: "25",
      },
      outboundService: sink,
    });
    const stats = () => outboxCounts(mf, TOKEN);
    const worker = await mf.getWorker();
    let drains = 0;
    let draining = true;
    const cron = (async () => {
      while (draining) {
        // Two overlapping cron runs at a time.
        await Promise.all([worker.scheduled({ cron: "*/1 * * * *" }), worker.scheduled({ cron: "*/1 * * * *" })]);
        drains += 2;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })();
    try {
      const ids = [];
      for (let n = 0; n < SIGNUPS; n++) {
        const response = await mf.dispatchFetch("http://example.test/signup", {
          method: "POST",
          body: JSON.stringify({ email: `user${n}@example.com` }),
        });
        assert.equal(response.status, 201);
        ids.push((await response.json()).outbox_id);
      }
      await eventually(
        async () => {
          const s = await stats();
          return s.pending === 0 && s.leased === 0 && s.dead === 0;
        },
        { timeoutMs: 120_000, everyMs: 200 },
      );
      const missing = ids.filter((id) => !accepted.has(id));
      const duplicates = [...accepted.values()].reduce((sum, n) => sum + n - 1, 0);
      console.log(
        `reliability (seed ${seed}): ${SIGNUPS} sign-ups, ${figures.requests} mail API requests, ` +
          `${figures.refused} refused (503), ${figures.hung} hung past the lease, ${drains} cron drains; ` +
          `${accepted.size} distinct mails accepted, ${missing.length} missing, ${duplicates} duplicates ` +
          `(the API saw the same Idempotency-Key again)`,
      );
      assert.deepEqual(missing, [], "every mail reached the API");
      const db = await mf.getD1Database("DB");
      assert.equal((await db.prepare("SELECT COUNT(*) AS n FROM outbox").first()).n, 0, "the outbox is empty");
    } finally {
      draining = false;
      await cron;
      await mf.dispose();
    }
  });
});
