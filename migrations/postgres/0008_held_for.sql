-- workers-outbox 0.6: the receiver whose failures hold a row back (see held_for in
-- src/outbox/schema.sql), so its held rows are due at once when it answers again.
ALTER TABLE "outbox" ADD COLUMN IF NOT EXISTS held_for TEXT;
CREATE INDEX IF NOT EXISTS "outbox_held" ON "outbox" (held_for, due_at) WHERE held_for IS NOT NULL;
