-- workers-outbox 0.5: rollups (counts per minute, topic and metric, written with the settles they
-- count) and the due time a lease was taken at, for the example's two outboxes
-- (see src/outbox/schema.sql).
ALTER TABLE "outbox" ADD COLUMN became_due INTEGER;
ALTER TABLE "account_events" ADD COLUMN became_due INTEGER;
CREATE TABLE IF NOT EXISTS "outbox_rollups" (
    period_ms    INTEGER NOT NULL,
    period_start INTEGER NOT NULL,
    topic        TEXT    NOT NULL,
    metric       TEXT    NOT NULL,
    le           INTEGER NOT NULL,
    count        INTEGER NOT NULL,
    PRIMARY KEY (period_ms, period_start, topic, metric, le)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS "account_events_rollups" (
    period_ms    INTEGER NOT NULL,
    period_start INTEGER NOT NULL,
    topic        TEXT    NOT NULL,
    metric       TEXT    NOT NULL,
    le           INTEGER NOT NULL,
    count        INTEGER NOT NULL,
    PRIMARY KEY (period_ms, period_start, topic, metric, le)
) STRICT, WITHOUT ROWID;
