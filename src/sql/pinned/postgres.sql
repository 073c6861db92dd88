-- stats
SELECT COUNT((CASE WHEN ((NOT ("state" = $1 AND "lease_token" IS NOT NULL AND "due_at" > $2)) AND "state" <> $3) THEN $4 END)) AS "pending", COUNT((CASE WHEN ("state" = $5 AND "due_at" <= $6) THEN $7 END)) AS "due", COUNT((CASE WHEN ("state" = $8 AND "lease_token" IS NOT NULL AND "due_at" > $9) THEN $10 END)) AS "leased", COUNT((CASE WHEN ("state" = $11) THEN $12 END)) AS "dead", MIN((CASE WHEN ("state" = $13 AND "due_at" <= $14) THEN "due_at" END)) AS "oldest_due_at" FROM "outbox";
-- binds [Text("ready"), Integer(1000), Text("dead"), Integer(1), Text("ready"), Integer(1000), Integer(1), Text("ready"), Integer(1000), Integer(1), Text("dead"), Integer(1), Text("ready"), Integer(1000)]

-- backlog
SELECT COUNT(*) AS "due", MIN("due_at") AS "oldest_due_at" FROM (SELECT "due_at" FROM "outbox" WHERE "state" = $1 AND "due_at" <= $2 ORDER BY "due_at" ASC LIMIT $3) AS "due_rows";
-- binds [Text("ready"), Integer(1000), Integer(100)]

-- overview
SELECT (SELECT count(*) FROM (SELECT 1 AS one FROM "outbox" WHERE state = 'ready' AND due_at <= $1 ORDER BY due_at LIMIT $2) AS due_rows) AS due, (SELECT due_at FROM "outbox" WHERE state = 'ready' AND due_at <= $3 ORDER BY due_at LIMIT 1) AS oldest_due_at, later.total AS later, later.leased AS leased, (SELECT count(*) FROM (SELECT 1 AS one FROM "outbox" WHERE state = 'waiting' ORDER BY due_at LIMIT $4) AS waiting_rows) AS waiting, (SELECT count(*) FROM (SELECT 1 AS one FROM "outbox" WHERE state = 'dead' ORDER BY due_at LIMIT $5) AS dead_rows) AS dead FROM (SELECT count(*) AS total, count(lease_token) AS leased FROM (SELECT lease_token FROM "outbox" WHERE state = 'ready' AND due_at > $6 ORDER BY due_at LIMIT $7) AS later_rows) AS later;
-- binds [Integer(1000), Integer(200), Integer(1000), Integer(200), Integer(200), Integer(1000), Integer(200)]

-- due now
SELECT (SELECT count(*) FROM (SELECT 1 AS one FROM "outbox" WHERE state = 'ready' AND due_at <= $1 ORDER BY due_at LIMIT $2) AS due_rows) AS due, (SELECT due_at FROM "outbox" WHERE state = 'ready' AND due_at <= $3 ORDER BY due_at LIMIT 1) AS oldest_due_at;
-- binds [Integer(1000), Integer(50), Integer(1000)]

-- message at
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE ("state" = ('ready') OR "state" = ('waiting') OR "state" = ('dead')) AND "due_at" = $1 AND "id" = $2 LIMIT $3;
-- binds [Integer(2000), Text("m1"), Integer(1)]

-- heads
SELECT * FROM (SELECT id, ordering_key, state, due_at, lease_token FROM "outbox" WHERE ordering_key = $1 ORDER BY seq LIMIT 1) AS head UNION ALL SELECT * FROM (SELECT id, ordering_key, state, due_at, lease_token FROM "outbox" WHERE ordering_key = $2 ORDER BY seq LIMIT 1) AS head;
-- binds [Text("k1"), Text("k2")]

-- reschedule now
UPDATE "outbox" SET "due_at" = $1, "late_due" = CASE WHEN pg_current_xact_id() IS NOT NULL THEN CASE WHEN $2 < (SELECT last_value FROM "outbox_claim_pending") THEN $3 END END WHERE "state" = ('ready') AND "due_at" = $4 AND "id" = $5 AND "lease_token" IS NULL AND "due_at" > $6;
-- binds [Integer(1000), Integer(1000), Integer(1000), Integer(2000), Text("m1"), Integer(1000)]

-- dead keys
SELECT DISTINCT "ordering_key" FROM "outbox" WHERE "state" = ('dead') AND "id" IN ($1, $2) AND "ordering_key" IS NOT NULL;
-- binds [Text("m1"), Text("m2")]

-- purge one
DELETE FROM "outbox" WHERE "state" = ('dead') AND "id" = $1 RETURNING "id";
-- binds [Text("m1")]

-- dead scan
SELECT "id", "topic", "due_at", "subject", substr("last_error", 1, 200) AS "last_error" FROM "outbox" WHERE "state" = ('dead') AND "due_at" >= $1 AND "due_at" <= $2 ORDER BY "due_at" ASC, "id" ASC LIMIT $3;
-- binds [Integer(500), Integer(1000), Integer(1000)]

-- dead scan of a topic and subject
SELECT "id", "topic", "due_at", "last_error" FROM (SELECT "id", "topic", "due_at", "subject", substr("last_error", 1, 200) AS "last_error" FROM "outbox" WHERE "state" = ('dead') AND "due_at" >= $1 AND "due_at" <= $2 ORDER BY "due_at" ASC, "id" ASC LIMIT $3) AS "dead_walked" WHERE "topic" = $4 AND "subject" IN ($5, $6) ORDER BY "due_at" ASC, "id" ASC;
-- binds [Integer(500), Integer(1000), Integer(1000), Text("mail"), Text("ada"), Text("h:1f")]

-- dead walk count
SELECT count(*) AS "walked" FROM (SELECT "due_at", "id" FROM "outbox" WHERE "state" = ('dead') AND "due_at" >= $1 AND "due_at" <= $2 ORDER BY "due_at" ASC, "id" ASC LIMIT $3) AS "dead_walked";
-- binds [Integer(500), Integer(1000), Integer(1000)]

-- list dead
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals" FROM "outbox" WHERE "state" = ('dead') ORDER BY "due_at" ASC, "id" ASC LIMIT $1;
-- binds [Integer(50)]

-- list dead after
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals" FROM "outbox" WHERE "state" = ('dead') AND ("due_at" > $1 OR ("due_at" = $2 AND "id" > $3)) ORDER BY "due_at" ASC, "id" ASC LIMIT $4;
-- binds [Integer(2000), Integer(2000), Text("m1"), Integer(50)]

-- every message
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals" FROM "outbox" ORDER BY "created_at" ASC, "id" ASC;
-- binds []

-- purge dead
DELETE FROM "outbox" WHERE "state" = ('dead') AND "due_at" < $1 RETURNING "id";
-- binds [Integer(1000)]

-- replay one
UPDATE "outbox" SET "state" = $1, "due_at" = $2, "attempts" = $3, "deferrals" = $4, "lease_token" = $5, "late_due" = CASE WHEN pg_current_xact_id() IS NOT NULL THEN CASE WHEN $6 < (SELECT last_value FROM "outbox_claim_pending") THEN $7 END END WHERE "state" = ('dead') AND "id" = $8;
-- binds [Text("ready"), Integer(1000), Integer(0), Integer(0), Null, Integer(1000), Integer(1000), Text("m1")]

-- replay all
UPDATE "outbox" SET "state" = $1, "due_at" = $2, "attempts" = $3, "deferrals" = $4, "lease_token" = $5, "late_due" = CASE WHEN pg_current_xact_id() IS NOT NULL THEN CASE WHEN $6 < (SELECT last_value FROM "outbox_claim_pending") THEN $7 END END WHERE "state" = ('dead');
-- binds [Text("ready"), Integer(1000), Integer(0), Integer(0), Null, Integer(1000), Integer(1000)]

-- export subject
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals" FROM "outbox" WHERE "subject" IN ($1, $2) ORDER BY "created_at" ASC, "id" ASC;
-- binds [Text("ada"), Text("h:1f")]

-- hold erased successors
UPDATE "outbox" SET "due_at" = GREATEST("outbox"."due_at", (SELECT MAX("erased"."due_at") FROM "outbox" AS "erased" WHERE "erased"."ordering_key" = "outbox"."ordering_key" AND "erased"."subject" IN ($1, $2) AND "erased"."state" = $3 AND "erased"."lease_token" IS NOT NULL AND "erased"."due_at" > $4 AND "erased"."ordering_key" IS NOT NULL)) WHERE "state" = $5 AND "ordering_key" IN (SELECT "erased"."ordering_key" FROM "outbox" AS "erased" WHERE "erased"."subject" IN ($6, $7) AND "erased"."state" = $8 AND "erased"."lease_token" IS NOT NULL AND "erased"."due_at" > $9 AND "erased"."ordering_key" IS NOT NULL);
-- binds [Text("ada"), Text("h:1f"), Text("ready"), Integer(1000), Text("waiting"), Text("ada"), Text("h:1f"), Text("ready"), Integer(1000)]

-- erase subject
DELETE FROM "outbox" WHERE "subject" IN ($1, $2) RETURNING "id";
-- binds [Text("ada"), Text("h:1f")]

-- erase events
DELETE FROM "outbox_events" WHERE "subject" IN ($1, $2);
-- binds [Text("ada"), Text("h:1f")]

-- tombstone
INSERT INTO "erased_subjects" ("subject", "erased_at") VALUES ($1, $2) ON CONFLICT ("subject") DO UPDATE SET "erased_at" = "excluded"."erased_at";
-- binds [Text("h:1f"), Integer(1000)]

-- forget tombstones
DELETE FROM "erased_subjects" WHERE "erased_at" < $1;
-- binds [Integer(1000)]

-- read tombstone
SELECT "erased_at" FROM "erased_subjects" WHERE "subject" IN ($1, $2) AND "erased_at" <> $3 ORDER BY "erased_at" DESC LIMIT $4;
-- binds [Text("ada"), Text("h:1f"), Integer(-1), Integer(1)]

-- erased since
SELECT "subject" FROM "erased_subjects" WHERE "subject" IN ($1, $2) AND "erased_at" >= $3;
-- binds [Text("ada"), Text("h:1f"), Integer(1000)]

-- page of due
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE "state" = $1 AND "due_at" <= $2 ORDER BY "due_at" ASC, "id" ASC LIMIT $3;
-- binds [Text("ready"), Integer(1000), Integer(50)]

-- page of scheduled (and where its walk ended)
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM (SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE "state" = $1 AND "due_at" > $2 ORDER BY "due_at" ASC, "id" ASC LIMIT $3) AS "walked" WHERE "lease_token" IS NULL ORDER BY "due_at" ASC, "id" ASC LIMIT $4;
-- binds [Text("ready"), Integer(1000), Integer(1000), Integer(50)]

-- page of scheduled (and where its walk ended)
SELECT "due_at", "id" FROM "outbox" WHERE "state" = $1 AND "due_at" > $2 ORDER BY "due_at" ASC, "id" ASC LIMIT $3 OFFSET $4;
-- binds [Text("ready"), Integer(1000), Integer(1), Integer(999)]

-- page of leased (and where its walk ended)
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM (SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE "state" = $1 AND "due_at" > $2 ORDER BY "due_at" ASC, "id" ASC LIMIT $3) AS "walked" WHERE "lease_token" IS NOT NULL ORDER BY "due_at" ASC, "id" ASC LIMIT $4;
-- binds [Text("ready"), Integer(1000), Integer(1000), Integer(50)]

-- page of leased (and where its walk ended)
SELECT "due_at", "id" FROM "outbox" WHERE "state" = $1 AND "due_at" > $2 ORDER BY "due_at" ASC, "id" ASC LIMIT $3 OFFSET $4;
-- binds [Text("ready"), Integer(1000), Integer(1), Integer(999)]

-- page of waiting
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE "state" = $1 ORDER BY "due_at" ASC, "id" ASC LIMIT $2;
-- binds [Text("waiting"), Integer(50)]

-- page of dead
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE "state" = ('dead') ORDER BY "due_at" ASC, "id" ASC LIMIT $1;
-- binds [Integer(50)]

-- filtered page (and where its walk ended)
SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM (SELECT "state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "attempts", "lease_token", "last_error", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate" FROM "outbox" WHERE "state" = $1 AND "due_at" <= $2 AND ("due_at" > $3 OR ("due_at" = $4 AND "id" > $5)) ORDER BY "due_at" ASC, "id" ASC LIMIT $6) AS "walked" WHERE "topic" = $7 AND "subject" IN ($8, $9) AND "id" >= $10 AND "id" < $11 ORDER BY "due_at" ASC, "id" ASC LIMIT $12;
-- binds [Text("ready"), Integer(1000), Integer(2000), Integer(2000), Text("m1"), Integer(1000), Text("mail"), Text("ada"), Text("h:1f"), Text("01J"), Text("01K"), Integer(50)]

-- filtered page (and where its walk ended)
SELECT "due_at", "id" FROM "outbox" WHERE "state" = $1 AND "due_at" <= $2 AND ("due_at" > $3 OR ("due_at" = $4 AND "id" > $5)) ORDER BY "due_at" ASC, "id" ASC LIMIT $6 OFFSET $7;
-- binds [Text("ready"), Integer(1000), Integer(2000), Integer(2000), Text("m1"), Integer(1), Integer(999)]
