-- workers-outbox 0.6: a receiver's failure streak remembers when it began and whether its
-- operator was told (the operational events outbox.receiver.failing and .recovered; see
-- src/outbox/schema.sql), for the example's two outboxes.
ALTER TABLE "outbox_topics" ADD COLUMN since INTEGER;
ALTER TABLE "outbox_topics" ADD COLUMN told INTEGER NOT NULL DEFAULT 0 CHECK (told IN (0, 1));
ALTER TABLE "account_events_topics" ADD COLUMN since INTEGER;
ALTER TABLE "account_events_topics" ADD COLUMN told INTEGER NOT NULL DEFAULT 0 CHECK (told IN (0, 1));
