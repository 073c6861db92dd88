-- workers-outbox 0.4: what each outbox remembers of its topics across drains, the streak of
-- retryable failures since a topic's receiver last answered (see src/outbox/schema.sql), for the
-- example's two outboxes.
CREATE TABLE IF NOT EXISTS "outbox_topics" (
    topic      TEXT    NOT NULL PRIMARY KEY,
    failing_id TEXT    NOT NULL,
    several    INTEGER NOT NULL CHECK (several IN (0, 1)),
    failed_at  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS "account_events_topics" (
    topic      TEXT    NOT NULL PRIMARY KEY,
    failing_id TEXT    NOT NULL,
    several    INTEGER NOT NULL CHECK (several IN (0, 1)),
    failed_at  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
