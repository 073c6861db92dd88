-- workers-outbox 0.6: the data keys of sealed payloads (OutboxBuilder::key_ring, src/seal/): one per
-- message or event sealed with a subject, deleted with its message (the trigger) or by its subject's
-- erasure (see src/outbox/schema.sql), for the example's two outboxes.
CREATE TABLE IF NOT EXISTS "outbox_keys" (
    subject    TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    ring_key   TEXT    NOT NULL,
    wrapped    TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (subject, id)
) STRICT, WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS "outbox_forget_key" AFTER DELETE ON "outbox"
WHEN OLD.subject IS NOT NULL AND OLD.event_id IS NULL AND substr(OLD.payload, 1, 11) = 'sealed:1:d:' BEGIN
    DELETE FROM "outbox_keys" WHERE subject = OLD.subject AND id = substr(OLD.payload, 12, 26);
END;
CREATE TABLE IF NOT EXISTS "account_events_keys" (
    subject    TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    ring_key   TEXT    NOT NULL,
    wrapped    TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (subject, id)
) STRICT, WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS "account_events_forget_key" AFTER DELETE ON "account_events"
WHEN OLD.subject IS NOT NULL AND OLD.event_id IS NULL AND substr(OLD.payload, 1, 11) = 'sealed:1:d:' BEGIN
    DELETE FROM "account_events_keys" WHERE subject = OLD.subject AND id = substr(OLD.payload, 12, 26);
END;
