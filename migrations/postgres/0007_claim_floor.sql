-- workers-outbox 0.6: the claim floor (see src/outbox/schema.postgres.sql and src/sql/claim_floor.rs).
-- A claim's walk of the due index starts at the floor, so its cost no longer depends on when
-- vacuum last ran. Apply it once every writer runs 0.6 (see CHANGELOG.md, "Upgrading from 0.5").
ALTER TABLE "outbox" ADD COLUMN IF NOT EXISTS late_due BIGINT;
CREATE INDEX IF NOT EXISTS "outbox_late" ON "outbox" (late_due, id) WHERE late_due IS NOT NULL;
CREATE SEQUENCE IF NOT EXISTS "outbox_claim_floor" AS BIGINT
    MINVALUE -9223372036854775808 START WITH -9223372036854775808 OWNED BY "outbox".due_at;
CREATE SEQUENCE IF NOT EXISTS "outbox_claim_pending" AS BIGINT
    MINVALUE -9223372036854775808 START WITH -9223372036854775808 OWNED BY "outbox".due_at;
CREATE SEQUENCE IF NOT EXISTS "outbox_claim_fence" AS BIGINT
    MINVALUE -1 START WITH 0 OWNED BY "outbox".due_at;
-- Room on every page for a claim's new row version (see "fillfactor" in schema.postgres.sql);
-- applies to pages written from now on.
ALTER TABLE "outbox" SET (fillfactor = 80);
