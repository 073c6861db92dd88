-- workers-outbox 0.5: each outbox message keeps the W3C trace context it was enqueued with
-- (see src/outbox/schema.postgres.sql).
ALTER TABLE "outbox" ADD COLUMN IF NOT EXISTS traceparent TEXT;
ALTER TABLE "outbox" ADD COLUMN IF NOT EXISTS tracestate TEXT;
