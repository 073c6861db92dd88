-- Inbox table "{table}", from workers-outbox. One row per processed message key:
-- written in the same batch as the message's effect, so an effect happens once.
CREATE TABLE IF NOT EXISTS "{table}" (
    key     TEXT    NOT NULL PRIMARY KEY,
    subject TEXT,
    seen_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "{table}_seen_at" ON "{table}" (seen_at);
CREATE INDEX IF NOT EXISTS "{table}_subject" ON "{table}" (subject) WHERE subject IS NOT NULL;
