-- workers-outbox 0.5: the stored pause switch of the outbox's topics (see
-- src/outbox/schema.postgres.sql). A topic paused (by a receiver's 410 Gone, or an operator) is not
-- drained until it is resumed.
CREATE TABLE IF NOT EXISTS "outbox_paused" (
    topic     TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    reason    TEXT   NOT NULL,
    paused_at BIGINT NOT NULL
);
