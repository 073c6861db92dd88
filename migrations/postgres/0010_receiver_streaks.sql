-- workers-outbox 0.6: a receiver's failure streak remembers when it began and whether its
-- operator was told (the operational events outbox.receiver.failing and .recovered; see
-- src/outbox/schema.sql) for the table "outbox". `Outbox::create_schema` applies the same.
ALTER TABLE "outbox_topics" ADD COLUMN IF NOT EXISTS since BIGINT;
ALTER TABLE "outbox_topics" ADD COLUMN IF NOT EXISTS told BIGINT NOT NULL DEFAULT 0 CHECK (told IN (0, 1));
