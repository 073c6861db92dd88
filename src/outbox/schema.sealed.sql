-- SQLite, in an outbox with a key ring (OutboxBuilder::key_ring) only: a sealed message's data key
-- goes with its row, however the row is deleted (settled, purged, erased). Only there, because a
-- DELETE trigger on "{table}" makes SQLite delete in two passes, so each deleted row is read twice
-- (D1 and Durable Objects bill both reads). Postgres's trigger is in schema.postgres.sql.
CREATE TRIGGER IF NOT EXISTS "{table}_forget_key" AFTER DELETE ON "{table}"
WHEN OLD.subject IS NOT NULL AND OLD.event_id IS NULL AND substr(OLD.payload, 1, 11) = 'sealed:1:d:' BEGIN
    DELETE FROM "{table}_keys" WHERE subject = OLD.subject AND id = substr(OLD.payload, 12, 26);
END;
