-- workers-outbox 0.5: the stored pause switch of each outbox's topics (see src/outbox/schema.sql),
-- for the example's two outboxes. A topic paused (by a receiver's 410 Gone, or an operator) is not
-- drained until it is resumed.
CREATE TABLE IF NOT EXISTS "outbox_paused" (
    topic     TEXT    NOT NULL PRIMARY KEY,
    reason    TEXT    NOT NULL,
    paused_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS "account_events_paused" (
    topic     TEXT    NOT NULL PRIMARY KEY,
    reason    TEXT    NOT NULL,
    paused_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
