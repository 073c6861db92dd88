-- workers-outbox 0.6: the alerts of each outbox (OutboxBuilder::alert): when each rule was last
-- told (see src/outbox/schema.sql), for the example's two outboxes.
CREATE TABLE IF NOT EXISTS "outbox_alerts" (
    rule         TEXT    NOT NULL PRIMARY KEY,
    window_start INTEGER NOT NULL,
    told_by      TEXT    NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS "account_events_alerts" (
    rule         TEXT    NOT NULL PRIMARY KEY,
    window_start INTEGER NOT NULL,
    told_by      TEXT    NOT NULL
) STRICT, WITHOUT ROWID;
