// Checks the native console example (examples/console-postgres, axum over
// Postgres) over HTTP: `node scripts/console-native-check.mjs <console URL>
// <token>`. Exits non-zero, saying what failed, unless the page, access
// rules and the pause switch answer as docs/console.md says.
import assert from "node:assert/strict";

const [base, token] = process.argv.slice(2);
const auth = { authorization: `Bearer ${token}` };
const change = { ...auth, "content-type": "application/json", "x-outbox-console": "1", "sec-fetch-site": "same-origin" };

const page = await fetch(`${base}/`);
assert.equal(page.status, 200);
assert.match(page.headers.get("content-security-policy"), /frame-ancestors 'none'/);
assert.match(await page.text(), /<script src="console.js" defer>/);
assert.equal((await fetch(`${base}/api/session`)).status, 401, "no credentials, no data");
const session = await (await fetch(`${base}/api/session`, { headers: auth })).json();
assert.deepEqual([session.role, session.outboxes, session.inboxes], ["operator", ["outbox"], ["inbox"]]);
const overview = await (await fetch(`${base}/api/outboxes/outbox`, { headers: auth })).json();
assert.equal(typeof overview.counts.due.count, "number");
const crossSite = await fetch(`${base}/api/outboxes/outbox/topics/pause`, {
  method: "POST",
  headers: { ...change, "sec-fetch-site": "cross-site" },
  body: JSON.stringify({ topic: "native-check" }),
});
assert.equal(crossSite.status, 403, "a cross-site change is refused");
// Resumed first (a run stopped half-way may have left it paused), then switched both ways.
await fetch(`${base}/api/outboxes/outbox/topics/resume`, { method: "POST", headers: change, body: JSON.stringify({ topic: "native-check" }) });
for (const [action, paused] of [["pause", true], ["resume", false]]) {
  const switched = await fetch(`${base}/api/outboxes/outbox/topics/${action}`, {
    method: "POST",
    headers: change,
    // The topic has no message: a pause says it means one all the same.
    body: JSON.stringify({ topic: "native-check", reason: "checked by npm test", unseen: true }),
  });
  assert.equal(switched.status, 200, action);
  assert.deepEqual(await switched.json(), { topic: "native-check", paused, changed: true });
}
console.log(`native console at ${base}: page, access rules and the pause switch answer as documented`);
