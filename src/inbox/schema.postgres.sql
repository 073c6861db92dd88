-- Inbox table "{table}", from workers-outbox, for PostgreSQL. One row per processed message key:
-- written in the same transaction as the message's effect, so an effect happens once.
CREATE TABLE IF NOT EXISTS "{table}" (
    key     TEXT   NOT NULL PRIMARY KEY,
    subject TEXT,
    seen_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS "{table}_seen_at" ON "{table}" (seen_at);
CREATE INDEX IF NOT EXISTS "{table}_subject" ON "{table}" (subject) WHERE subject IS NOT NULL;
