-- Tombstones of erased subjects, from workers-outbox, one table per database for all its outboxes
-- and inboxes. While a subject's tombstone is here (30 days from its erasure), a batch writing an
-- outbox message or inbox key that carries the subject fails whole. A tombstone holds the subject
-- key and the erasure's time in Unix ms, nothing else.
CREATE TABLE IF NOT EXISTS "{table}" (
    subject   TEXT    NOT NULL PRIMARY KEY,
    erased_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "{table}_erased_at" ON "{table}" (erased_at);
