-- workers-outbox 0.2. unsettled_leases: how many leases in a row expired without a settle; a
-- message with one is a suspect (it may crash its drainer) and is delivered alone until its
-- outcome is known. deferrals: failures that spent no attempt (receiver unavailable, circuit
-- open); they grow the backoff and bound how long a message is retried for free.
ALTER TABLE "outbox" ADD COLUMN unsettled_leases INTEGER NOT NULL DEFAULT 0;
ALTER TABLE "outbox" ADD COLUMN deferrals INTEGER NOT NULL DEFAULT 0;
