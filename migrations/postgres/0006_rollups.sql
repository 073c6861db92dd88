-- workers-outbox 0.5: rollups (counts per minute, topic and metric, written with the settles they
-- count) and the due time a lease was taken at (see src/outbox/schema.postgres.sql).
ALTER TABLE "outbox" ADD COLUMN IF NOT EXISTS became_due BIGINT;
CREATE TABLE IF NOT EXISTS "outbox_rollups" (
    period_ms    BIGINT NOT NULL,
    period_start BIGINT NOT NULL,
    topic        TEXT   COLLATE "C" NOT NULL,
    metric       TEXT   COLLATE "C" NOT NULL,
    le           BIGINT NOT NULL,
    count        BIGINT NOT NULL,
    PRIMARY KEY (period_ms, period_start, topic, metric, le)
);
