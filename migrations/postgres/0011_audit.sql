-- workers-outbox 0.6: the audit log of the table "outbox": every change an operator makes
-- through the console, written in the change's own atomic call (see src/outbox/schema.sql).
-- `Outbox::create_schema` applies the same.
CREATE TABLE IF NOT EXISTS "outbox_audit" (
    at        BIGINT NOT NULL,
    id        TEXT   COLLATE "C" NOT NULL,
    who       TEXT   NOT NULL,
    role      TEXT   NOT NULL,
    action    TEXT   NOT NULL,
    selection TEXT   NOT NULL,
    result    TEXT,
    PRIMARY KEY (at, id)
);
