-- Outbox table "{table}", from workers-outbox, for PostgreSQL. The columns mean what they mean in
-- the SQLite schema (src/outbox/schema.sql); times are Unix milliseconds.
-- The primary key is the id (a message's id is unique: a ULID, or the caller's own). The due index
-- leads with (state, due_at), so a claim reads only due rows; claims lock the rows they lease with
-- FOR UPDATE SKIP LOCKED, so concurrent drainers never wait on each other.
-- id is compared byte-wise (COLLATE "C"), as SQLite compares it, whatever the database's locale.
-- The ordering index is unique: two transactions enqueueing under one ordering key at the same
-- moment cannot both take its next place (the later one fails, retryable, and changes nothing).
CREATE TABLE IF NOT EXISTS "{table}" (
    state        TEXT   NOT NULL,
    due_at       BIGINT NOT NULL,
    id           TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    topic        TEXT   NOT NULL,
    payload      TEXT   NOT NULL,
    subject      TEXT,
    dedup_key    TEXT,
    ordering_key TEXT,
    seq          BIGINT,
    id_given     BIGINT NOT NULL DEFAULT 0 CHECK (id_given IN (0, 1)),
    attempts     BIGINT NOT NULL DEFAULT 0,
    lease_token  TEXT,
    last_error   TEXT,
    created_at   BIGINT NOT NULL,
    unsettled_leases BIGINT NOT NULL DEFAULT 0,
    deferrals    BIGINT NOT NULL DEFAULT 0,
    traceparent  TEXT,
    tracestate   TEXT,
    became_due   BIGINT,
    late_due     BIGINT,
    held_for     TEXT,
    event_id     TEXT
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000,
        autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0.05);
-- Room on every page (a new table and one an earlier release created alike; for the latter, pages
-- written from now on): a claim's new row version (not HOT, as due_at changes) stays on the row's
-- page, and page pruning frees a deleted row's space there without waiting for vacuum, so a
-- backlog drained between vacuums does not extend the table.
ALTER TABLE "{table}" SET (fillfactor = 80);
-- Columns newer than the table, for one an earlier release created (`create_schema` then upgrades it).
ALTER TABLE "{table}" ADD COLUMN IF NOT EXISTS traceparent TEXT;
ALTER TABLE "{table}" ADD COLUMN IF NOT EXISTS tracestate TEXT;
ALTER TABLE "{table}" ADD COLUMN IF NOT EXISTS became_due BIGINT;
ALTER TABLE "{table}" ADD COLUMN IF NOT EXISTS late_due BIGINT;
ALTER TABLE "{table}" ADD COLUMN IF NOT EXISTS held_for TEXT;
ALTER TABLE "{table}" ADD COLUMN IF NOT EXISTS event_id TEXT;
CREATE INDEX IF NOT EXISTS "{table}_due" ON "{table}" (state, due_at, id);
CREATE UNIQUE INDEX IF NOT EXISTS "{table}_dedup" ON "{table}" (dedup_key) WHERE dedup_key IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS "{table}_ordering" ON "{table}" (ordering_key, seq) WHERE ordering_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS "{table}_subject" ON "{table}" (subject) WHERE subject IS NOT NULL;
-- The rows held for a receiver (see held_for in the SQLite schema), released oldest first when it
-- answers again.
CREATE INDEX IF NOT EXISTS "{table}_held" ON "{table}" (held_for, due_at) WHERE held_for IS NOT NULL;
-- The claim floor (src/sql/postgres/claim_floor.rs): every claimable row due before "{table}_claim_floor"
-- is marked late (late_due = due_at; null otherwise), so a claim walks the due index from the
-- floor (past the entries of rows leased or delivered before it, whether or not vacuum has
-- removed them yet) and the late rows through "{table}_late". Writers mark a row late when its
-- due time is below "{table}_claim_pending";
-- "{table}_claim_fence" is the transaction id the floor's next step waits for. Sequences, not a
-- table: setval is seen at once and leaves no row versions behind.
CREATE INDEX IF NOT EXISTS "{table}_late" ON "{table}" (late_due, id) WHERE late_due IS NOT NULL;
CREATE SEQUENCE IF NOT EXISTS "{table}_claim_floor" AS BIGINT
    MINVALUE -9223372036854775808 START WITH -9223372036854775808 OWNED BY "{table}".due_at;
CREATE SEQUENCE IF NOT EXISTS "{table}_claim_pending" AS BIGINT
    MINVALUE -9223372036854775808 START WITH -9223372036854775808 OWNED BY "{table}".due_at;
CREATE SEQUENCE IF NOT EXISTS "{table}_claim_fence" AS BIGINT
    MINVALUE -1 START WITH 0 OWNED BY "{table}".due_at;
-- Per-topic memory across drains, as in the SQLite schema: the streak of retryable failures since
-- the topic's receiver last answered.
CREATE TABLE IF NOT EXISTS "{table}_topics" (
    topic      TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    failing_id TEXT   NOT NULL,
    several    BIGINT NOT NULL CHECK (several IN (0, 1)),
    failed_at  BIGINT NOT NULL,
    since      BIGINT,
    told       BIGINT NOT NULL DEFAULT 0 CHECK (told IN (0, 1))
);
ALTER TABLE "{table}_topics" ADD COLUMN IF NOT EXISTS since BIGINT;
ALTER TABLE "{table}_topics" ADD COLUMN IF NOT EXISTS told BIGINT NOT NULL DEFAULT 0 CHECK (told IN (0, 1));
-- Paused topics, as in the SQLite schema: no drain leases a paused topic's rows until it is resumed.
CREATE TABLE IF NOT EXISTS "{table}_paused" (
    topic     TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    reason    TEXT   NOT NULL,
    paused_at BIGINT NOT NULL
);
-- Rollups of "{table}": see src/outbox/schema.sql.
CREATE TABLE IF NOT EXISTS "{table}_periods" (
    period_ms               BIGINT NOT NULL,
    period_start            BIGINT NOT NULL,
    topic                   TEXT   COLLATE "C" NOT NULL,
    delivered               BIGINT NOT NULL DEFAULT 0,
    retried                 BIGINT NOT NULL DEFAULT 0,
    deferred                BIGINT NOT NULL DEFAULT 0,
    dead                    BIGINT NOT NULL DEFAULT 0,
    dead_at_claim           BIGINT NOT NULL DEFAULT 0,
    handed_back             BIGINT NOT NULL DEFAULT 0,
    lease_lost              BIGINT NOT NULL DEFAULT 0,
    suspects_alone          BIGINT NOT NULL DEFAULT 0,
    breaker_trips           BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_5        BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_10       BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_25       BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_50       BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_100      BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_250      BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_500      BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_1000     BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_2500     BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_5000     BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_10000    BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_30000    BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_60000    BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_300000   BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_900000   BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_3600000  BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_21600000 BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_86400000 BIGINT NOT NULL DEFAULT 0,
    lateness_ms_le_inf      BIGINT NOT NULL DEFAULT 0,
    age_ms_le_5             BIGINT NOT NULL DEFAULT 0,
    age_ms_le_10            BIGINT NOT NULL DEFAULT 0,
    age_ms_le_25            BIGINT NOT NULL DEFAULT 0,
    age_ms_le_50            BIGINT NOT NULL DEFAULT 0,
    age_ms_le_100           BIGINT NOT NULL DEFAULT 0,
    age_ms_le_250           BIGINT NOT NULL DEFAULT 0,
    age_ms_le_500           BIGINT NOT NULL DEFAULT 0,
    age_ms_le_1000          BIGINT NOT NULL DEFAULT 0,
    age_ms_le_2500          BIGINT NOT NULL DEFAULT 0,
    age_ms_le_5000          BIGINT NOT NULL DEFAULT 0,
    age_ms_le_10000         BIGINT NOT NULL DEFAULT 0,
    age_ms_le_30000         BIGINT NOT NULL DEFAULT 0,
    age_ms_le_60000         BIGINT NOT NULL DEFAULT 0,
    age_ms_le_300000        BIGINT NOT NULL DEFAULT 0,
    age_ms_le_900000        BIGINT NOT NULL DEFAULT 0,
    age_ms_le_3600000       BIGINT NOT NULL DEFAULT 0,
    age_ms_le_21600000      BIGINT NOT NULL DEFAULT 0,
    age_ms_le_86400000      BIGINT NOT NULL DEFAULT 0,
    age_ms_le_inf           BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_5        BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_10       BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_25       BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_50       BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_100      BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_250      BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_500      BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_1000     BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_2500     BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_5000     BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_10000    BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_30000    BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_60000    BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_300000   BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_900000   BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_3600000  BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_21600000 BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_86400000 BIGINT NOT NULL DEFAULT 0,
    duration_ms_le_inf      BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (period_ms, period_start, topic)
);
-- Adds a transaction's counts to its rollup rows, in one statement sent last in the transaction: what
-- its settles stashed in their transaction-local setting (src/sql/rollups.rs), the counts `counted`
-- binds (`[minute, topic, column, n]`, a column by its index among the count columns above), and the
-- rows that the claim `claim_token` at `claimed_at` parked as dead. It locks every rollup row the
-- transaction adds to in (minute, topic) order, so two drainers never take the same rows in opposite
-- orders; and a session keeps a function's plans, so its 66 columns are not planned again each call.
-- Created once: a release that changes the count columns replaces it in its migration (CREATE OR
-- REPLACE); a count naming no column fails its transaction rather than vanish.
DO $$
BEGIN
    IF to_regproc('"{table}_add_counts"') IS NULL THEN
        BEGIN
            CREATE FUNCTION "{table}_add_counts"(counted JSONB, claim_minute BIGINT, claimed_at BIGINT,
                                                 claim_token TEXT) RETURNS BIGINT LANGUAGE plpgsql AS $body$
            DECLARE
                stash CONSTANT TEXT := 'workers_outbox.rollups_' || encode(convert_to('{table}', 'UTF8'), 'hex');
                entries CONSTANT JSONB := COALESCE(NULLIF(current_setting(stash, true), ''), '[]')::JSONB
                                          || counted;
                added BIGINT;
            BEGIN
                IF EXISTS (SELECT 1 FROM jsonb_array_elements(entries) AS e
                           WHERE (e ->> 2)::INTEGER NOT BETWEEN 0 AND 65) THEN
                    RAISE EXCEPTION 'workers-outbox: a count names no column of "{table}_periods"';
                END IF;
                INSERT INTO "{table}_periods" AS p (period_ms, period_start, topic,
                    delivered,
                    retried,
                    deferred,
                    dead,
                    dead_at_claim,
                    handed_back,
                    lease_lost,
                    suspects_alone,
                    breaker_trips,
                    lateness_ms_le_5,
                    lateness_ms_le_10,
                    lateness_ms_le_25,
                    lateness_ms_le_50,
                    lateness_ms_le_100,
                    lateness_ms_le_250,
                    lateness_ms_le_500,
                    lateness_ms_le_1000,
                    lateness_ms_le_2500,
                    lateness_ms_le_5000,
                    lateness_ms_le_10000,
                    lateness_ms_le_30000,
                    lateness_ms_le_60000,
                    lateness_ms_le_300000,
                    lateness_ms_le_900000,
                    lateness_ms_le_3600000,
                    lateness_ms_le_21600000,
                    lateness_ms_le_86400000,
                    lateness_ms_le_inf,
                    age_ms_le_5,
                    age_ms_le_10,
                    age_ms_le_25,
                    age_ms_le_50,
                    age_ms_le_100,
                    age_ms_le_250,
                    age_ms_le_500,
                    age_ms_le_1000,
                    age_ms_le_2500,
                    age_ms_le_5000,
                    age_ms_le_10000,
                    age_ms_le_30000,
                    age_ms_le_60000,
                    age_ms_le_300000,
                    age_ms_le_900000,
                    age_ms_le_3600000,
                    age_ms_le_21600000,
                    age_ms_le_86400000,
                    age_ms_le_inf,
                    duration_ms_le_5,
                    duration_ms_le_10,
                    duration_ms_le_25,
                    duration_ms_le_50,
                    duration_ms_le_100,
                    duration_ms_le_250,
                    duration_ms_le_500,
                    duration_ms_le_1000,
                    duration_ms_le_2500,
                    duration_ms_le_5000,
                    duration_ms_le_10000,
                    duration_ms_le_30000,
                    duration_ms_le_60000,
                    duration_ms_le_300000,
                    duration_ms_le_900000,
                    duration_ms_le_3600000,
                    duration_ms_le_21600000,
                    duration_ms_le_86400000,
                    duration_ms_le_inf)
                SELECT 60000, s.minute, s.topic,
                    SUM(CASE WHEN s.col = 0 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 1 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 2 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 3 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 4 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 5 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 6 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 7 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 8 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 9 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 10 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 11 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 12 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 13 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 14 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 15 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 16 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 17 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 18 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 19 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 20 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 21 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 22 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 23 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 24 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 25 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 26 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 27 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 28 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 29 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 30 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 31 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 32 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 33 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 34 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 35 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 36 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 37 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 38 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 39 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 40 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 41 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 42 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 43 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 44 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 45 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 46 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 47 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 48 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 49 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 50 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 51 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 52 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 53 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 54 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 55 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 56 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 57 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 58 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 59 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 60 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 61 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 62 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 63 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 64 THEN s.n ELSE 0 END),
                    SUM(CASE WHEN s.col = 65 THEN s.n ELSE 0 END)
                FROM (
                    SELECT (e ->> 0)::BIGINT AS minute, e ->> 1 AS topic, (e ->> 2)::INTEGER AS col,
                           (e ->> 3)::BIGINT AS n
                    FROM jsonb_array_elements(entries) AS e
                    UNION ALL
                    SELECT claim_minute, o.topic, 4, COUNT(*) FROM "{table}" AS o
                    WHERE claim_token IS NOT NULL AND o.state = 'dead' AND o.due_at = claimed_at
                      AND o.lease_token = claim_token
                    GROUP BY 2
                ) AS s
                GROUP BY 2, 3 ORDER BY 2, 3
                ON CONFLICT (period_ms, period_start, topic) DO UPDATE SET
                    delivered = p.delivered + excluded.delivered,
                    retried = p.retried + excluded.retried,
                    deferred = p.deferred + excluded.deferred,
                    dead = p.dead + excluded.dead,
                    dead_at_claim = p.dead_at_claim + excluded.dead_at_claim,
                    handed_back = p.handed_back + excluded.handed_back,
                    lease_lost = p.lease_lost + excluded.lease_lost,
                    suspects_alone = p.suspects_alone + excluded.suspects_alone,
                    breaker_trips = p.breaker_trips + excluded.breaker_trips,
                    lateness_ms_le_5 = p.lateness_ms_le_5 + excluded.lateness_ms_le_5,
                    lateness_ms_le_10 = p.lateness_ms_le_10 + excluded.lateness_ms_le_10,
                    lateness_ms_le_25 = p.lateness_ms_le_25 + excluded.lateness_ms_le_25,
                    lateness_ms_le_50 = p.lateness_ms_le_50 + excluded.lateness_ms_le_50,
                    lateness_ms_le_100 = p.lateness_ms_le_100 + excluded.lateness_ms_le_100,
                    lateness_ms_le_250 = p.lateness_ms_le_250 + excluded.lateness_ms_le_250,
                    lateness_ms_le_500 = p.lateness_ms_le_500 + excluded.lateness_ms_le_500,
                    lateness_ms_le_1000 = p.lateness_ms_le_1000 + excluded.lateness_ms_le_1000,
                    lateness_ms_le_2500 = p.lateness_ms_le_2500 + excluded.lateness_ms_le_2500,
                    lateness_ms_le_5000 = p.lateness_ms_le_5000 + excluded.lateness_ms_le_5000,
                    lateness_ms_le_10000 = p.lateness_ms_le_10000 + excluded.lateness_ms_le_10000,
                    lateness_ms_le_30000 = p.lateness_ms_le_30000 + excluded.lateness_ms_le_30000,
                    lateness_ms_le_60000 = p.lateness_ms_le_60000 + excluded.lateness_ms_le_60000,
                    lateness_ms_le_300000 = p.lateness_ms_le_300000 + excluded.lateness_ms_le_300000,
                    lateness_ms_le_900000 = p.lateness_ms_le_900000 + excluded.lateness_ms_le_900000,
                    lateness_ms_le_3600000 = p.lateness_ms_le_3600000 + excluded.lateness_ms_le_3600000,
                    lateness_ms_le_21600000 = p.lateness_ms_le_21600000 + excluded.lateness_ms_le_21600000,
                    lateness_ms_le_86400000 = p.lateness_ms_le_86400000 + excluded.lateness_ms_le_86400000,
                    lateness_ms_le_inf = p.lateness_ms_le_inf + excluded.lateness_ms_le_inf,
                    age_ms_le_5 = p.age_ms_le_5 + excluded.age_ms_le_5,
                    age_ms_le_10 = p.age_ms_le_10 + excluded.age_ms_le_10,
                    age_ms_le_25 = p.age_ms_le_25 + excluded.age_ms_le_25,
                    age_ms_le_50 = p.age_ms_le_50 + excluded.age_ms_le_50,
                    age_ms_le_100 = p.age_ms_le_100 + excluded.age_ms_le_100,
                    age_ms_le_250 = p.age_ms_le_250 + excluded.age_ms_le_250,
                    age_ms_le_500 = p.age_ms_le_500 + excluded.age_ms_le_500,
                    age_ms_le_1000 = p.age_ms_le_1000 + excluded.age_ms_le_1000,
                    age_ms_le_2500 = p.age_ms_le_2500 + excluded.age_ms_le_2500,
                    age_ms_le_5000 = p.age_ms_le_5000 + excluded.age_ms_le_5000,
                    age_ms_le_10000 = p.age_ms_le_10000 + excluded.age_ms_le_10000,
                    age_ms_le_30000 = p.age_ms_le_30000 + excluded.age_ms_le_30000,
                    age_ms_le_60000 = p.age_ms_le_60000 + excluded.age_ms_le_60000,
                    age_ms_le_300000 = p.age_ms_le_300000 + excluded.age_ms_le_300000,
                    age_ms_le_900000 = p.age_ms_le_900000 + excluded.age_ms_le_900000,
                    age_ms_le_3600000 = p.age_ms_le_3600000 + excluded.age_ms_le_3600000,
                    age_ms_le_21600000 = p.age_ms_le_21600000 + excluded.age_ms_le_21600000,
                    age_ms_le_86400000 = p.age_ms_le_86400000 + excluded.age_ms_le_86400000,
                    age_ms_le_inf = p.age_ms_le_inf + excluded.age_ms_le_inf,
                    duration_ms_le_5 = p.duration_ms_le_5 + excluded.duration_ms_le_5,
                    duration_ms_le_10 = p.duration_ms_le_10 + excluded.duration_ms_le_10,
                    duration_ms_le_25 = p.duration_ms_le_25 + excluded.duration_ms_le_25,
                    duration_ms_le_50 = p.duration_ms_le_50 + excluded.duration_ms_le_50,
                    duration_ms_le_100 = p.duration_ms_le_100 + excluded.duration_ms_le_100,
                    duration_ms_le_250 = p.duration_ms_le_250 + excluded.duration_ms_le_250,
                    duration_ms_le_500 = p.duration_ms_le_500 + excluded.duration_ms_le_500,
                    duration_ms_le_1000 = p.duration_ms_le_1000 + excluded.duration_ms_le_1000,
                    duration_ms_le_2500 = p.duration_ms_le_2500 + excluded.duration_ms_le_2500,
                    duration_ms_le_5000 = p.duration_ms_le_5000 + excluded.duration_ms_le_5000,
                    duration_ms_le_10000 = p.duration_ms_le_10000 + excluded.duration_ms_le_10000,
                    duration_ms_le_30000 = p.duration_ms_le_30000 + excluded.duration_ms_le_30000,
                    duration_ms_le_60000 = p.duration_ms_le_60000 + excluded.duration_ms_le_60000,
                    duration_ms_le_300000 = p.duration_ms_le_300000 + excluded.duration_ms_le_300000,
                    duration_ms_le_900000 = p.duration_ms_le_900000 + excluded.duration_ms_le_900000,
                    duration_ms_le_3600000 = p.duration_ms_le_3600000 + excluded.duration_ms_le_3600000,
                    duration_ms_le_21600000 = p.duration_ms_le_21600000 + excluded.duration_ms_le_21600000,
                    duration_ms_le_86400000 = p.duration_ms_le_86400000 + excluded.duration_ms_le_86400000,
                    duration_ms_le_inf = p.duration_ms_le_inf + excluded.duration_ms_le_inf;
                GET DIAGNOSTICS added = ROW_COUNT;
                PERFORM set_config(stash, '', true);
                RETURN added;
            END
            $body$;
        EXCEPTION WHEN duplicate_function OR unique_violation THEN NULL; -- another session created it meanwhile
        END;
    END IF;
END
$$;
-- Endpoints, their subscriptions and their events: see src/outbox/schema.sql.
CREATE TABLE IF NOT EXISTS "{table}_endpoints" (
    id         TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    owner      TEXT   COLLATE "C" NOT NULL,
    target     TEXT   NOT NULL,
    metadata   TEXT   NOT NULL,
    state      TEXT   NOT NULL,
    filter_field TEXT,
    filter_value TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS "{table}_endpoints_owner" ON "{table}_endpoints" (owner, id);
CREATE TABLE IF NOT EXISTS "{table}_subscriptions" (
    event_type TEXT COLLATE "C" NOT NULL,
    endpoint   TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (event_type, endpoint)
);
CREATE INDEX IF NOT EXISTS "{table}_subscriptions_endpoint" ON "{table}_subscriptions" (endpoint);
CREATE TABLE IF NOT EXISTS "{table}_events" (
    id         TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    owner      TEXT   COLLATE "C" NOT NULL,
    event_type TEXT   NOT NULL,
    payload    TEXT   NOT NULL,
    subject    TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS "{table}_events_owner" ON "{table}_events" (owner, created_at);
CREATE INDEX IF NOT EXISTS "{table}_events_created" ON "{table}_events" (created_at);
-- The attempt log: see src/outbox/schema.sql.
CREATE TABLE IF NOT EXISTS "{table}_attempts" (
    message_id  TEXT   COLLATE "C" NOT NULL,
    slot        BIGINT NOT NULL,
    topic       TEXT   COLLATE "C" NOT NULL,
    event_id    TEXT,
    subject     TEXT,
    attempt     BIGINT NOT NULL,
    at          BIGINT NOT NULL,
    status      BIGINT,
    duration_ms BIGINT NOT NULL,
    outcome     TEXT   NOT NULL,
    error       TEXT,
    headers     TEXT   NOT NULL,
    body        TEXT   NOT NULL,
    PRIMARY KEY (message_id, slot)
);
CREATE INDEX IF NOT EXISTS "{table}_attempts_topic" ON "{table}_attempts" (topic, at);
CREATE INDEX IF NOT EXISTS "{table}_attempts_at" ON "{table}_attempts" (at);
CREATE INDEX IF NOT EXISTS "{table}_attempts_subject" ON "{table}_attempts" (subject) WHERE subject IS NOT NULL;
-- The audit log of "{table}": each change an operator made through the console, written in the
-- change's own atomic call (see src/outbox/schema.sql).
CREATE TABLE IF NOT EXISTS "{table}_audit" (
    at        BIGINT NOT NULL,
    id        TEXT   COLLATE "C" NOT NULL,
    who       TEXT   NOT NULL,
    role      TEXT   NOT NULL,
    action    TEXT   NOT NULL,
    selection TEXT   NOT NULL,
    result    TEXT,
    PRIMARY KEY (at, id)
);
-- The alerts of "{table}" (OutboxBuilder::alert): per rule, the window in which it was last told
-- and the event that told it (see src/outbox/schema.sql).
CREATE TABLE IF NOT EXISTS "{table}_alerts" (
    rule         TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    window_start BIGINT NOT NULL,
    told_by      TEXT   NOT NULL
);
-- Statistics from the start: a table filled before autovacuum first analyzes it would otherwise be
-- planned as tiny, and its claims would sort every due row instead of walking the due index.
ANALYZE "{table}";
-- Data keys of sealed payloads: see src/outbox/schema.sql.
CREATE TABLE IF NOT EXISTS "{table}_keys" (
    subject    TEXT   COLLATE "C" NOT NULL,
    id         TEXT   COLLATE "C" NOT NULL,
    ring_key   TEXT   NOT NULL,
    wrapped    TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (subject, id)
);
DO $$
BEGIN
    IF to_regproc('"{table}_forget_key"') IS NULL THEN
        BEGIN
            CREATE FUNCTION "{table}_forget_key"() RETURNS trigger LANGUAGE plpgsql AS $body$
            BEGIN
                DELETE FROM "{table}_keys" WHERE subject = OLD.subject AND id = substr(OLD.payload, 12, 26);
                RETURN NULL;
            END
            $body$;
        EXCEPTION WHEN duplicate_function THEN NULL; -- another session created it meanwhile
        END;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = '{table}_forget_key'
                   AND tgrelid = to_regclass('"{table}"')) THEN
        BEGIN
            CREATE TRIGGER "{table}_forget_key" AFTER DELETE ON "{table}" FOR EACH ROW
            WHEN (OLD.subject IS NOT NULL AND OLD.event_id IS NULL AND substr(OLD.payload, 1, 11) = 'sealed:1:d:')
            EXECUTE PROCEDURE "{table}_forget_key"();
        EXCEPTION WHEN duplicate_object THEN NULL; -- another session created it meanwhile
        END;
    END IF;
END
$$;
