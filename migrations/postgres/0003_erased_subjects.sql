-- workers-outbox 0.5: the tombstones of erased subjects (see src/erasure/schema.postgres.sql), one
-- table for every outbox and inbox of the database.
CREATE TABLE IF NOT EXISTS "erased_subjects" (
    subject   TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    erased_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS "erased_subjects_erased_at" ON "erased_subjects" (erased_at);
