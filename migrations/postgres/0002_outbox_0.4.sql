-- workers-outbox 0.4: what the outbox remembers of its topics across drains, the streak of
-- retryable failures since a topic's receiver last answered (see src/outbox/schema.postgres.sql).
CREATE TABLE IF NOT EXISTS "outbox_topics" (
    topic      TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    failing_id TEXT   NOT NULL,
    several    BIGINT NOT NULL CHECK (several IN (0, 1)),
    failed_at  BIGINT NOT NULL
);
