-- workers-outbox 0.6: the data keys of the table "outbox"'s sealed payloads (OutboxBuilder::key_ring,
-- src/seal/), deleted with their message (the trigger) or by their subject's erasure (see
-- src/outbox/schema.sql). `Outbox::create_schema` applies the same.
CREATE TABLE IF NOT EXISTS "outbox_keys" (
    subject    TEXT   COLLATE "C" NOT NULL,
    id         TEXT   COLLATE "C" NOT NULL,
    ring_key   TEXT   NOT NULL,
    wrapped    TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (subject, id)
);
CREATE OR REPLACE FUNCTION "outbox_forget_key"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM "outbox_keys" WHERE subject = OLD.subject AND id = OLD.id;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER "outbox_forget_key" AFTER DELETE ON "outbox" FOR EACH ROW
WHEN (OLD.subject IS NOT NULL AND OLD.event_id IS NULL) EXECUTE FUNCTION "outbox_forget_key"();
