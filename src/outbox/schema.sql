-- Outbox table "{table}", from workers-outbox. One row per undelivered or dead message.
--   state   'ready'   deliverable from due_at on; while leased, due_at is the lease's end
--           'waiting' queued behind an earlier row with the same ordering_key
--           'dead'    parked after a permanent failure or its last attempt; due_at = when it died
-- attempts counts failed deliveries (and leases of a message delivered alone that expired unsettled);
-- unsettled_leases counts the leases in a row that expired without a settle: a message with one
-- is a suspect, delivered alone until its outcome is known. deferrals counts failures that spent
-- no attempt (receiver unavailable, circuit open); it grows the backoff and bounds free retries.
-- traceparent and tracestate are the W3C trace context the message was enqueued with, if any.
-- became_due is when the current (or last) lease's row was due: the due_at it had before it was leased.
-- event_id is the event a fan-out delivery carries (its webhook-id, the same on every endpoint), null
-- for a plain message; such a row's topic is its endpoint's id.
-- held_for is the receiver (the topic, or "topic @ destination") whose failures hold the row back
-- while it waits unleased after a retry that spent no attempt (null otherwise): when that receiver
-- answers again, a drain makes its held rows due at once, oldest first, through "{table}_held".
-- The primary key leads with (state, due_at), so a claim reads only due rows.
-- (`state` has no CHECK constraint: on D1 it costs a row read per claimed row. The
-- decoder rejects unknown states instead.)
CREATE TABLE IF NOT EXISTS "{table}" (
    state        TEXT    NOT NULL,
    due_at       INTEGER NOT NULL,
    id           TEXT    NOT NULL,
    topic        TEXT    NOT NULL,
    payload      TEXT    NOT NULL,
    subject      TEXT,
    dedup_key    TEXT,
    ordering_key TEXT,
    seq          INTEGER,
    id_given     INTEGER NOT NULL DEFAULT 0 CHECK (id_given IN (0, 1)),
    attempts     INTEGER NOT NULL DEFAULT 0,
    lease_token  TEXT,
    last_error   TEXT,
    created_at   INTEGER NOT NULL,
    unsettled_leases INTEGER NOT NULL DEFAULT 0,
    deferrals    INTEGER NOT NULL DEFAULT 0,
    traceparent  TEXT,
    tracestate   TEXT,
    became_due   INTEGER,
    held_for     TEXT,
    event_id     TEXT,
    PRIMARY KEY (state, due_at, id)
) STRICT, WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS "{table}_dedup" ON "{table}" (dedup_key) WHERE dedup_key IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS "{table}_given_id" ON "{table}" (id) WHERE id_given = 1;
CREATE INDEX IF NOT EXISTS "{table}_ordering" ON "{table}" (ordering_key, seq) WHERE ordering_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS "{table}_dead_id" ON "{table}" (id) WHERE state = 'dead';
CREATE INDEX IF NOT EXISTS "{table}_held" ON "{table}" (held_for, due_at) WHERE held_for IS NOT NULL;
-- Per-topic memory of "{table}" across drains: the streak of retryable failures since the topic's
-- receiver last answered (deleted when it does). topic is the receiver: the topic, or
-- "topic @ destination" when the deliverer names destinations. failing_id is the message that failed last; several
-- is 1 once another message failed in the streak too (one message failing again and again spends
-- its attempts; several failing in turn blame the receiver and spend none); failed_at, in Unix ms,
-- its last failure (a streak is forgotten a day after it); since its first; told is 1 once the
-- operator was told the receiver is failing (an operational event).
CREATE TABLE IF NOT EXISTS "{table}_topics" (
    topic      TEXT    NOT NULL PRIMARY KEY,
    failing_id TEXT    NOT NULL,
    several    INTEGER NOT NULL CHECK (several IN (0, 1)),
    failed_at  INTEGER NOT NULL,
    since      INTEGER,
    told       INTEGER NOT NULL DEFAULT 0 CHECK (told IN (0, 1))
) STRICT, WITHOUT ROWID;
-- Topics of "{table}" paused: while a topic has a row here, no drain leases its rows or spends their
-- attempts; they wait, due, until it is resumed (the row deleted). reason says why (a receiver's
-- 410 Gone, or an operator's words); paused_at, in Unix ms, since when.
CREATE TABLE IF NOT EXISTS "{table}_paused" (
    topic     TEXT    NOT NULL PRIMARY KEY,
    reason    TEXT    NOT NULL,
    paused_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
-- Rollups of "{table}": a row per period (a minute, or an hour once the minute is 48 h old; hours are
-- kept 90 days) and topic, written in the same atomic call as the changes they count, so that a settle
-- writes one row however many metrics it counts. A counter (delivered, retried, deferred, dead,
-- dead_at_claim, handed_back, lease_lost, suspects_alone, breaker_trips) is a column; a histogram
-- (lateness_ms, age_ms, duration_ms) is a column per bucket, <histogram>_le_<upper bound in ms>
-- (_le_inf: no bound). src/sql/rollups.rs names the same columns in the same order.
CREATE TABLE IF NOT EXISTS "{table}_periods" (
    period_ms               INTEGER NOT NULL,
    period_start            INTEGER NOT NULL,
    topic                   TEXT    NOT NULL,
    delivered               INTEGER NOT NULL DEFAULT 0,
    retried                 INTEGER NOT NULL DEFAULT 0,
    deferred                INTEGER NOT NULL DEFAULT 0,
    dead                    INTEGER NOT NULL DEFAULT 0,
    dead_at_claim           INTEGER NOT NULL DEFAULT 0,
    handed_back             INTEGER NOT NULL DEFAULT 0,
    lease_lost              INTEGER NOT NULL DEFAULT 0,
    suspects_alone          INTEGER NOT NULL DEFAULT 0,
    breaker_trips           INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_5        INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_10       INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_25       INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_50       INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_100      INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_250      INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_500      INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_1000     INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_2500     INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_5000     INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_10000    INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_30000    INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_60000    INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_300000   INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_900000   INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_3600000  INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_21600000 INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_86400000 INTEGER NOT NULL DEFAULT 0,
    lateness_ms_le_inf      INTEGER NOT NULL DEFAULT 0,
    age_ms_le_5             INTEGER NOT NULL DEFAULT 0,
    age_ms_le_10            INTEGER NOT NULL DEFAULT 0,
    age_ms_le_25            INTEGER NOT NULL DEFAULT 0,
    age_ms_le_50            INTEGER NOT NULL DEFAULT 0,
    age_ms_le_100           INTEGER NOT NULL DEFAULT 0,
    age_ms_le_250           INTEGER NOT NULL DEFAULT 0,
    age_ms_le_500           INTEGER NOT NULL DEFAULT 0,
    age_ms_le_1000          INTEGER NOT NULL DEFAULT 0,
    age_ms_le_2500          INTEGER NOT NULL DEFAULT 0,
    age_ms_le_5000          INTEGER NOT NULL DEFAULT 0,
    age_ms_le_10000         INTEGER NOT NULL DEFAULT 0,
    age_ms_le_30000         INTEGER NOT NULL DEFAULT 0,
    age_ms_le_60000         INTEGER NOT NULL DEFAULT 0,
    age_ms_le_300000        INTEGER NOT NULL DEFAULT 0,
    age_ms_le_900000        INTEGER NOT NULL DEFAULT 0,
    age_ms_le_3600000       INTEGER NOT NULL DEFAULT 0,
    age_ms_le_21600000      INTEGER NOT NULL DEFAULT 0,
    age_ms_le_86400000      INTEGER NOT NULL DEFAULT 0,
    age_ms_le_inf           INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_5        INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_10       INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_25       INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_50       INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_100      INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_250      INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_500      INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_1000     INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_2500     INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_5000     INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_10000    INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_30000    INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_60000    INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_300000   INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_900000   INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_3600000  INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_21600000 INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_86400000 INTEGER NOT NULL DEFAULT 0,
    duration_ms_le_inf      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (period_ms, period_start, topic)
) STRICT, WITHOUT ROWID;
-- Endpoints of "{table}" (receivers as data, src/endpoint/): an endpoint's deliveries are rows of
-- "{table}" whose topic is its id, so its breaker, streak and pause are its own. owner is the tenant
-- the application names; target is the JSON a delivery reads at each attempt (URL and secrets),
-- which a claim returns with each of its rows; metadata is the application's JSON; filter_field
-- (a dot-separated path) and filter_value, when set, let through only events whose payload holds
-- that value there. state is
-- 'enabled', 'disabled' or 'paused'; a disabled or paused endpoint has a row in "{table}_paused"
-- too (as has one a 410 disabled while its state still says 'enabled'), so no drain leases its
-- deliveries; a disabled one is given no new events. Times are Unix ms.
CREATE TABLE IF NOT EXISTS "{table}_endpoints" (
    id         TEXT    NOT NULL PRIMARY KEY,
    owner      TEXT    NOT NULL,
    target     TEXT    NOT NULL,
    metadata   TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    filter_field TEXT,
    filter_value TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "{table}_endpoints_owner" ON "{table}_endpoints" (owner, id);
-- The event types each endpoint of "{table}" subscribes to ('*': every type), read by type when an
-- event fans out.
CREATE TABLE IF NOT EXISTS "{table}_subscriptions" (
    event_type TEXT NOT NULL,
    endpoint   TEXT NOT NULL,
    PRIMARY KEY (event_type, endpoint)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "{table}_subscriptions_endpoint" ON "{table}_subscriptions" (endpoint);
-- Events published through "{table}": id (the webhook-id), owner, type, payload and subject as
-- published, created_at in Unix ms. Kept for the outbox's event retention (a drain's sweep deletes
-- older ones, oldest first), so an endpoint's deliveries can be recovered since a time.
CREATE TABLE IF NOT EXISTS "{table}_events" (
    id         TEXT    NOT NULL PRIMARY KEY,
    owner      TEXT    NOT NULL,
    event_type TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    subject    TEXT,
    created_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "{table}_events_owner" ON "{table}_events" (owner, created_at);
CREATE INDEX IF NOT EXISTS "{table}_events_created" ON "{table}_events" (created_at);
-- The attempt log of "{table}": what a receiver answered to an attempt (when the deliverer logs
-- it: failures only by default), written in the drain's settle call while the lease holds. A
-- message keeps at most a few slots (slot = its attempts and deferrals so far, modulo their
-- number), each replaced by a later attempt; topic is the endpoint's id for an endpoint's
-- delivery. at and duration_ms in Unix ms / ms; status null when no answer came; headers a JSON
-- object of the chosen response headers; body the start of the response body (4 KiB at most).
-- Kept for the outbox's attempt retention (a drain's sweep deletes older ones).
CREATE TABLE IF NOT EXISTS "{table}_attempts" (
    message_id  TEXT    NOT NULL,
    slot        INTEGER NOT NULL,
    topic       TEXT    NOT NULL,
    event_id    TEXT,
    subject     TEXT,
    attempt     INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    status      INTEGER,
    duration_ms INTEGER NOT NULL,
    outcome     TEXT    NOT NULL,
    error       TEXT,
    headers     TEXT    NOT NULL,
    body        TEXT    NOT NULL,
    PRIMARY KEY (message_id, slot)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "{table}_attempts_topic" ON "{table}_attempts" (topic, at);
CREATE INDEX IF NOT EXISTS "{table}_attempts_at" ON "{table}_attempts" (at);
CREATE INDEX IF NOT EXISTS "{table}_attempts_subject" ON "{table}_attempts" (subject) WHERE subject IS NOT NULL;
-- The audit log of "{table}": each change an operator made through the console, written in the
-- change's own atomic call: when (Unix ms) and an id, who (as the console's authorizer named them)
-- and their role, the action (the console's route), what it selected (JSON, as asked, never a
-- secret), and what it did (JSON, filled in once the change committed; null if that write was
-- lost). Kept for the outbox's audit retention (a drain's sweep deletes older entries).
CREATE TABLE IF NOT EXISTS "{table}_audit" (
    at        INTEGER NOT NULL,
    id        TEXT    NOT NULL,
    who       TEXT    NOT NULL,
    role      TEXT    NOT NULL,
    action    TEXT    NOT NULL,
    selection TEXT    NOT NULL,
    result    TEXT,
    PRIMARY KEY (at, id)
) STRICT, WITHOUT ROWID;
-- The alerts of "{table}" (OutboxBuilder::alert): per rule, the start of the window (Unix ms) in
-- which it was last told and the event that told it, written by a drain's sweep in the call that
-- keeps the event, so a rule is told at most once per window however many drains sweep.
CREATE TABLE IF NOT EXISTS "{table}_alerts" (
    rule         TEXT    NOT NULL PRIMARY KEY,
    window_start INTEGER NOT NULL,
    told_by      TEXT    NOT NULL
) STRICT, WITHOUT ROWID;
-- Data keys of "{table}"'s sealed payloads (OutboxBuilder::key_ring, src/seal/): one per message or
-- event sealed with a subject, its id a ULID of its own that the sealed payload names (characters 12
-- to 37 of "sealed:1:d:<id>:…"). subject is the subject's keyed hash; ring_key the
-- ring key that wraps it; wrapped its nonce, ciphertext and tag (URL-safe base64). An erasure deletes
-- a subject's keys in its own batch, so no copy of its payloads opens again. A message's key goes
-- with its row (the trigger of schema.sealed.sql, in an outbox with a key ring); an event's stays
-- until its subject's erasure, since deliveries of the event may outlive the event's retention.
CREATE TABLE IF NOT EXISTS "{table}_keys" (
    subject    TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    ring_key   TEXT    NOT NULL,
    wrapped    TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (subject, id)
) STRICT, WITHOUT ROWID;
