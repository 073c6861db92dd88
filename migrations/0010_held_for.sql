-- workers-outbox 0.6: the receiver whose failures hold a row back (see held_for in
-- src/outbox/schema.sql), so its held rows are due at once when it answers again, for the
-- example's two outboxes.
ALTER TABLE "outbox" ADD COLUMN held_for TEXT;
CREATE INDEX IF NOT EXISTS "outbox_held" ON "outbox" (held_for, due_at) WHERE held_for IS NOT NULL;
ALTER TABLE "account_events" ADD COLUMN held_for TEXT;
CREATE INDEX IF NOT EXISTS "account_events_held" ON "account_events" (held_for, due_at) WHERE held_for IS NOT NULL;
