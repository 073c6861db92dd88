-- stats
SELECT COUNT((CASE WHEN ((NOT ("state" = ? AND "lease_token" IS NOT NULL AND "due_at" > ?)) AND "state" <> ?) THEN ? END)) AS "pending", COUNT((CASE WHEN ("state" = ? AND "due_at" <= ?) THEN ? END)) AS "due", COUNT((CASE WHEN ("state" = ? AND "lease_token" IS NOT NULL AND "due_at" > ?) THEN ? END)) AS "leased", COUNT((CASE WHEN ("state" = ?) THEN ? END)) AS "dead", MIN((CASE WHEN ("state" = ? AND "due_at" <= ?) THEN "due_at" END)) AS "oldest_due_at" FROM "outbox";
-- binds [Text("ready"), Integer(1000), Text("dead"), Integer(1), Text("ready"), Integer(1000), Integer(1), Text("ready"), Integer(1000), Integer(1), Text("dead"), Integer(1), Text("ready"), Integer(1000)]

-- backlog
SELECT COUNT(*) AS "due", MIN("due_at") AS "oldest_due_at" FROM (SELECT "due_at" FROM "outbox" WHERE "state" = ? AND "due_at" <= ? ORDER BY "due_at" ASC LIMIT ?) AS "due_rows";
-- binds [Text("ready"), Integer(1000), Integer(100)]

-- overview
SELECT (SELECT count(*) FROM (SELECT 1 AS one FROM "outbox" WHERE state = 'ready' AND due_at <= ? ORDER BY due_at LIMIT ?) AS due_rows) AS due, (SELECT due_at FROM "outbox" WHERE state = 'ready' AND due_at <= ? ORDER BY due_at LIMIT 1) AS oldest_due_at, later.total AS later, later.leased AS leased, (SELECT count(*) FROM (SELECT 1 AS one FROM "outbox" WHERE state = 'waiting' ORDER BY due_at LIMIT ?) AS waiting_rows) AS waiting, (SELECT count(*) FROM (SELECT 1 AS one FROM "outbox" WHERE state = 'dead' ORDER BY due_at LIMIT ?) AS dead_rows) AS dead FROM (SELECT count(*) AS total, count(lease_token) AS leased FROM (SELECT lease_token FROM "outbox" WHERE state = 'ready' AND due_at > ? ORDER BY due_at LIMIT ?) AS later_rows) AS later;
-- binds [Integer(1000), Integer(200), Integer(1000), Integer(200), Integer(200), Integer(1000), Integer(200)]

-- due now
SELECT (SELECT count(*) FROM (SELECT 1 AS one FROM "outbox" WHERE state = 'ready' AND due_at <= ? ORDER BY due_at LIMIT ?) AS due_rows) AS due, (SELECT due_at FROM "outbox" WHERE state = 'ready' AND due_at <= ? ORDER BY due_at LIMIT 1) AS oldest_due_at;
-- binds [Integer(1000), Integer(50), Integer(1000)]

-- message at
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE ("state" = ('ready') OR "state" = ('waiting') OR "state" = ('dead')) AND "due_at" = ? AND "id" = ? LIMIT ?;
-- binds [Integer(2000), Text("m1"), Integer(1)]

-- heads
SELECT * FROM (SELECT id, ordering_key, state, due_at, lease_token FROM "outbox" WHERE ordering_key = ? ORDER BY seq LIMIT 1) AS head UNION ALL SELECT * FROM (SELECT id, ordering_key, state, due_at, lease_token FROM "outbox" WHERE ordering_key = ? ORDER BY seq LIMIT 1) AS head;
-- binds [Text("k1"), Text("k2")]

-- reschedule now
UPDATE "outbox" SET "due_at" = ? WHERE "state" = ('ready') AND "due_at" = ? AND "id" = ? AND "lease_token" IS NULL AND "due_at" > ?;
-- binds [Integer(1000), Integer(2000), Text("m1"), Integer(1000)]

-- dead keys
SELECT DISTINCT "ordering_key" FROM "outbox" WHERE "state" = ('dead') AND "id" IN (?, ?) AND "ordering_key" IS NOT NULL;
-- binds [Text("m1"), Text("m2")]

-- purge one
DELETE FROM "outbox" WHERE "state" = ('dead') AND "id" = ? RETURNING "id";
-- binds [Text("m1")]

-- dead scan
SELECT "id", "topic", "due_at", "subject", substr("last_error", 1, 200) AS "last_error" FROM "outbox" WHERE "state" = ('dead') AND "due_at" >= ? AND "due_at" <= ? ORDER BY "due_at" ASC, "id" ASC LIMIT ?;
-- binds [Integer(500), Integer(1000), Integer(1000)]

-- dead scan of a topic and subject
SELECT "id", "topic", "due_at", "last_error" FROM (SELECT "id", "topic", "due_at", "subject", substr("last_error", 1, 200) AS "last_error" FROM "outbox" WHERE "state" = ('dead') AND "due_at" >= ? AND "due_at" <= ? ORDER BY "due_at" ASC, "id" ASC LIMIT ?) AS "dead_walked" WHERE "topic" = ? AND "subject" IN (?, ?) ORDER BY "due_at" ASC, "id" ASC;
-- binds [Integer(500), Integer(1000), Integer(1000), Text("mail"), Text("ada"), Text("h:1f")]

-- dead walk count
SELECT count(*) AS "walked" FROM (SELECT "due_at", "id" FROM "outbox" WHERE "state" = ('dead') AND "due_at" >= ? AND "due_at" <= ? ORDER BY "due_at" ASC, "id" ASC LIMIT ?) AS "dead_walked";
-- binds [Integer(500), Integer(1000), Integer(1000)]

-- list dead
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals" FROM "outbox" WHERE "state" = ('dead') ORDER BY "due_at" ASC, "id" ASC LIMIT ?;
-- binds [Integer(50)]

-- list dead after
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals" FROM "outbox" WHERE "state" = ('dead') AND ("due_at" > ? OR ("due_at" = ? AND "id" > ?)) ORDER BY "due_at" ASC, "id" ASC LIMIT ?;
-- binds [Integer(2000), Integer(2000), Text("m1"), Integer(50)]

-- every message
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals" FROM "outbox" ORDER BY "created_at" ASC, "id" ASC;
-- binds []

-- purge dead
DELETE FROM "outbox" WHERE "state" = ('dead') AND "due_at" < ? RETURNING "id";
-- binds [Integer(1000)]

-- replay one
UPDATE "outbox" SET "state" = ?, "due_at" = ?, "attempts" = ?, "deferrals" = ?, "lease_token" = ? WHERE "state" = ('dead') AND "id" = ?;
-- binds [Text("ready"), Integer(1000), Integer(0), Integer(0), Null, Text("m1")]

-- replay all
UPDATE "outbox" SET "state" = ?, "due_at" = ?, "attempts" = ?, "deferrals" = ?, "lease_token" = ? WHERE "state" = ('dead');
-- binds [Text("ready"), Integer(1000), Integer(0), Integer(0), Null]

-- export subject
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals" FROM "outbox" WHERE "subject" IN (?, ?) ORDER BY "created_at" ASC, "id" ASC;
-- binds [Text("ada"), Text("h:1f")]

-- hold erased successors
UPDATE "outbox" SET "due_at" = MAX("outbox"."due_at", (SELECT MAX("erased"."due_at") FROM "outbox" AS "erased" WHERE "erased"."ordering_key" = "outbox"."ordering_key" AND "erased"."subject" IN (?, ?) AND "erased"."state" = ? AND "erased"."lease_token" IS NOT NULL AND "erased"."due_at" > ? AND "erased"."ordering_key" IS NOT NULL)) WHERE "state" = ? AND "ordering_key" IN (SELECT "erased"."ordering_key" FROM "outbox" AS "erased" WHERE "erased"."subject" IN (?, ?) AND "erased"."state" = ? AND "erased"."lease_token" IS NOT NULL AND "erased"."due_at" > ? AND "erased"."ordering_key" IS NOT NULL);
-- binds [Text("ada"), Text("h:1f"), Text("ready"), Integer(1000), Text("waiting"), Text("ada"), Text("h:1f"), Text("ready"), Integer(1000)]

-- erase subject
DELETE FROM "outbox" WHERE "subject" IN (?, ?) RETURNING "id";
-- binds [Text("ada"), Text("h:1f")]

-- erase events
DELETE FROM "outbox_events" WHERE "subject" IN (?, ?);
-- binds [Text("ada"), Text("h:1f")]

-- tombstone
INSERT INTO "erased_subjects" ("subject", "erased_at") VALUES (?, ?) ON CONFLICT ("subject") DO UPDATE SET "erased_at" = "excluded"."erased_at";
-- binds [Text("h:1f"), Integer(1000)]

-- forget tombstones
DELETE FROM "erased_subjects" WHERE "erased_at" < ?;
-- binds [Integer(1000)]

-- read tombstone
SELECT "erased_at" FROM "erased_subjects" WHERE "subject" IN (?, ?) AND "erased_at" <> ? ORDER BY "erased_at" DESC LIMIT ?;
-- binds [Text("ada"), Text("h:1f"), Integer(-1), Integer(1)]

-- erased since
SELECT "subject" FROM "erased_subjects" WHERE "subject" IN (?, ?) AND "erased_at" >= ?;
-- binds [Text("ada"), Text("h:1f"), Integer(1000)]

-- page of due
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE "state" = ? AND "due_at" <= ? ORDER BY "due_at" ASC, "id" ASC LIMIT ?;
-- binds [Text("ready"), Integer(1000), Integer(50)]

-- page of scheduled (and where its walk ended)
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM (SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE "state" = ? AND "due_at" > ? ORDER BY "due_at" ASC, "id" ASC LIMIT ?) AS "walked" WHERE "lease_token" IS NULL ORDER BY "due_at" ASC, "id" ASC LIMIT ?;
-- binds [Text("ready"), Integer(1000), Integer(1000), Integer(50)]

-- page of scheduled (and where its walk ended)
SELECT "due_at", "id" FROM "outbox" WHERE "state" = ? AND "due_at" > ? ORDER BY "due_at" ASC, "id" ASC LIMIT ? OFFSET ?;
-- binds [Text("ready"), Integer(1000), Integer(1), Integer(999)]

-- page of leased (and where its walk ended)
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM (SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE "state" = ? AND "due_at" > ? ORDER BY "due_at" ASC, "id" ASC LIMIT ?) AS "walked" WHERE "lease_token" IS NOT NULL ORDER BY "due_at" ASC, "id" ASC LIMIT ?;
-- binds [Text("ready"), Integer(1000), Integer(1000), Integer(50)]

-- page of leased (and where its walk ended)
SELECT "due_at", "id" FROM "outbox" WHERE "state" = ? AND "due_at" > ? ORDER BY "due_at" ASC, "id" ASC LIMIT ? OFFSET ?;
-- binds [Text("ready"), Integer(1000), Integer(1), Integer(999)]

-- page of waiting
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE "state" = ? ORDER BY "due_at" ASC, "id" ASC LIMIT ?;
-- binds [Text("waiting"), Integer(50)]

-- page of dead
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE "state" = ('dead') ORDER BY "due_at" ASC, "id" ASC LIMIT ?;
-- binds [Integer(50)]

-- filtered page (and where its walk ended)
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM (SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE "state" = ? AND "due_at" <= ? AND ("due_at" > ? OR ("due_at" = ? AND "id" > ?)) ORDER BY "due_at" ASC, "id" ASC LIMIT ?) AS "walked" WHERE "topic" = ? AND "subject" IN (?, ?) AND "id" >= ? AND "id" < ? ORDER BY "due_at" ASC, "id" ASC LIMIT ?;
-- binds [Text("ready"), Integer(1000), Integer(2000), Integer(2000), Text("m1"), Integer(1000), Text("mail"), Text("ada"), Text("h:1f"), Text("01J"), Text("01K"), Integer(50)]

-- filtered page (and where its walk ended)
SELECT "due_at", "id" FROM "outbox" WHERE "state" = ? AND "due_at" <= ? AND ("due_at" > ? OR ("due_at" = ? AND "id" > ?)) ORDER BY "due_at" ASC, "id" ASC LIMIT ? OFFSET ?;
-- binds [Text("ready"), Integer(1000), Integer(2000), Integer(2000), Text("m1"), Integer(1), Integer(999)]

-- next due
SELECT MIN("due_at") AS "due_at" FROM "outbox" WHERE "state" = ? AND ((NOT EXISTS(SELECT 1 FROM "outbox_paused")) OR "outbox"."topic" NOT IN (SELECT "topic" FROM "outbox_paused"));
-- binds [Text("ready")]
