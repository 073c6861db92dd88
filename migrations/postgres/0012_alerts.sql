-- workers-outbox 0.6: the alerts of the table "outbox" (OutboxBuilder::alert): when each rule was
-- last told (see src/outbox/schema.sql). `Outbox::create_schema` applies the same.
CREATE TABLE IF NOT EXISTS "outbox_alerts" (
    rule         TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    window_start BIGINT NOT NULL,
    told_by      TEXT   NOT NULL
);
