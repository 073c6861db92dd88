-- workers-outbox 0.2: how many leases in a row expired without a settle. A message with
-- one is a suspect (it may crash its drainer) and is delivered alone until its outcome is known.
ALTER TABLE "outbox" ADD COLUMN unsettled_leases INTEGER NOT NULL DEFAULT 0;
