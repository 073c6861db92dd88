-- workers-outbox 0.6: the audit log of each outbox: every change an operator makes through the
-- console, written in the change's own atomic call (see src/outbox/schema.sql), for the
-- example's two outboxes.
CREATE TABLE IF NOT EXISTS "outbox_audit" (
    at        INTEGER NOT NULL,
    id        TEXT    NOT NULL,
    who       TEXT    NOT NULL,
    role      TEXT    NOT NULL,
    action    TEXT    NOT NULL,
    selection TEXT    NOT NULL,
    result    TEXT,
    PRIMARY KEY (at, id)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS "account_events_audit" (
    at        INTEGER NOT NULL,
    id        TEXT    NOT NULL,
    who       TEXT    NOT NULL,
    role      TEXT    NOT NULL,
    action    TEXT    NOT NULL,
    selection TEXT    NOT NULL,
    result    TEXT,
    PRIMARY KEY (at, id)
) STRICT, WITHOUT ROWID;
