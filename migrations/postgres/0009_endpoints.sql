-- workers-outbox 0.6: endpoints (receivers as data, src/endpoint/) for the table "outbox": the
-- event a fan-out delivery carries, the tables of endpoints, their subscriptions and the events
-- published to them, and the attempt log (see src/outbox/schema.sql). `Outbox::create_schema`
-- applies the same.
ALTER TABLE "outbox" ADD COLUMN IF NOT EXISTS event_id TEXT;
CREATE TABLE IF NOT EXISTS "outbox_endpoints" (
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
CREATE INDEX IF NOT EXISTS "outbox_endpoints_owner" ON "outbox_endpoints" (owner, id);
CREATE TABLE IF NOT EXISTS "outbox_subscriptions" (
    event_type TEXT COLLATE "C" NOT NULL,
    endpoint   TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (event_type, endpoint)
);
CREATE INDEX IF NOT EXISTS "outbox_subscriptions_endpoint" ON "outbox_subscriptions" (endpoint);
CREATE TABLE IF NOT EXISTS "outbox_events" (
    id         TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    owner      TEXT   COLLATE "C" NOT NULL,
    event_type TEXT   NOT NULL,
    payload    TEXT   NOT NULL,
    subject    TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS "outbox_events_owner" ON "outbox_events" (owner, created_at);
CREATE INDEX IF NOT EXISTS "outbox_events_created" ON "outbox_events" (created_at);
CREATE TABLE IF NOT EXISTS "outbox_attempts" (
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
CREATE INDEX IF NOT EXISTS "outbox_attempts_topic" ON "outbox_attempts" (topic, at);
CREATE INDEX IF NOT EXISTS "outbox_attempts_at" ON "outbox_attempts" (at);
CREATE INDEX IF NOT EXISTS "outbox_attempts_subject" ON "outbox_attempts" (subject) WHERE subject IS NOT NULL;
