-- Tombstones of erased subjects, as in the SQLite schema: one table per database; while a subject's
-- tombstone is here (30 days from its erasure), a transaction writing an outbox message or inbox
-- key that carries the subject fails whole. The subject key and the erasure's time, nothing else.
CREATE TABLE IF NOT EXISTS "{table}" (
    subject   TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    erased_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS "{table}_erased_at" ON "{table}" (erased_at);
