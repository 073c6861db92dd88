-- workers-outbox 0.5: each outbox message keeps the W3C trace context it was enqueued with
-- (see src/outbox/schema.sql), for the example's two outboxes.
ALTER TABLE "outbox" ADD COLUMN traceparent TEXT;
ALTER TABLE "outbox" ADD COLUMN tracestate TEXT;
ALTER TABLE "account_events" ADD COLUMN traceparent TEXT;
ALTER TABLE "account_events" ADD COLUMN tracestate TEXT;
-- The example's welcome rows keep the trace id of the sign-up that caused them.
ALTER TABLE welcomes ADD COLUMN trace_id TEXT;
