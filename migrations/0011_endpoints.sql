-- workers-outbox 0.6: endpoints (receivers as data, src/endpoint/), for the example's two outboxes:
-- the event a fan-out delivery carries, the tables of endpoints, their subscriptions and the events
-- published to them, and the attempt log (see src/outbox/schema.sql).
ALTER TABLE "outbox" ADD COLUMN event_id TEXT;
CREATE TABLE IF NOT EXISTS "outbox_endpoints" (
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
CREATE INDEX IF NOT EXISTS "outbox_endpoints_owner" ON "outbox_endpoints" (owner, id);
CREATE TABLE IF NOT EXISTS "outbox_subscriptions" (
    event_type TEXT NOT NULL,
    endpoint   TEXT NOT NULL,
    PRIMARY KEY (event_type, endpoint)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "outbox_subscriptions_endpoint" ON "outbox_subscriptions" (endpoint);
CREATE TABLE IF NOT EXISTS "outbox_events" (
    id         TEXT    NOT NULL PRIMARY KEY,
    owner      TEXT    NOT NULL,
    event_type TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    subject    TEXT,
    created_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "outbox_events_owner" ON "outbox_events" (owner, created_at);
CREATE INDEX IF NOT EXISTS "outbox_events_created" ON "outbox_events" (created_at);
ALTER TABLE "account_events" ADD COLUMN event_id TEXT;
CREATE TABLE IF NOT EXISTS "account_events_endpoints" (
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
CREATE INDEX IF NOT EXISTS "account_events_endpoints_owner" ON "account_events_endpoints" (owner, id);
CREATE TABLE IF NOT EXISTS "account_events_subscriptions" (
    event_type TEXT NOT NULL,
    endpoint   TEXT NOT NULL,
    PRIMARY KEY (event_type, endpoint)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "account_events_subscriptions_endpoint" ON "account_events_subscriptions" (endpoint);
CREATE TABLE IF NOT EXISTS "account_events_events" (
    id         TEXT    NOT NULL PRIMARY KEY,
    owner      TEXT    NOT NULL,
    event_type TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    subject    TEXT,
    created_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "account_events_events_owner" ON "account_events_events" (owner, created_at);
CREATE INDEX IF NOT EXISTS "account_events_events_created" ON "account_events_events" (created_at);
CREATE TABLE IF NOT EXISTS "outbox_attempts" (
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
CREATE INDEX IF NOT EXISTS "outbox_attempts_topic" ON "outbox_attempts" (topic, at);
CREATE INDEX IF NOT EXISTS "outbox_attempts_at" ON "outbox_attempts" (at);
CREATE INDEX IF NOT EXISTS "outbox_attempts_subject" ON "outbox_attempts" (subject) WHERE subject IS NOT NULL;
CREATE TABLE IF NOT EXISTS "account_events_attempts" (
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
CREATE INDEX IF NOT EXISTS "account_events_attempts_topic" ON "account_events_attempts" (topic, at);
CREATE INDEX IF NOT EXISTS "account_events_attempts_at" ON "account_events_attempts" (at);
CREATE INDEX IF NOT EXISTS "account_events_attempts_subject" ON "account_events_attempts" (subject) WHERE subject IS NOT NULL;
