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
DO $$
BEGIN
    IF to_regproc('"outbox_forget_key"') IS NULL THEN
        BEGIN
            CREATE FUNCTION "outbox_forget_key"() RETURNS trigger LANGUAGE plpgsql AS $body$
            BEGIN
                DELETE FROM "outbox_keys" WHERE subject = OLD.subject AND id = substr(OLD.payload, 12, 26);
                RETURN NULL;
            END
            $body$;
        EXCEPTION WHEN duplicate_function THEN NULL; -- another session created it meanwhile
        END;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'outbox_forget_key'
                   AND tgrelid = to_regclass('"outbox"')) THEN
        BEGIN
            CREATE TRIGGER "outbox_forget_key" AFTER DELETE ON "outbox" FOR EACH ROW
            WHEN (OLD.subject IS NOT NULL AND OLD.event_id IS NULL AND substr(OLD.payload, 1, 11) = 'sealed:1:d:')
            EXECUTE PROCEDURE "outbox_forget_key"();
        EXCEPTION WHEN duplicate_object THEN NULL; -- another session created it meanwhile
        END;
    END IF;
END
$$;
