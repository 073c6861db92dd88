-- Outbox table "outbox", from workers-outbox. One row per undelivered or dead message.
--   state   'ready'   deliverable from due_at on; while leased, due_at is the lease's end
--           'waiting' queued behind an earlier row with the same ordering_key
--           'dead'    parked after a permanent failure or its last attempt; due_at = when it died
-- The primary key leads with (state, due_at), so a claim reads only due rows.
-- (`state` has no CHECK constraint: on D1 it costs a row read per claimed row. The
-- decoder rejects unknown states instead.)
CREATE TABLE IF NOT EXISTS "outbox" (
    state        TEXT    NOT NULL,
    due_at       INTEGER NOT NULL,
    id           TEXT    NOT NULL,
    topic        TEXT    NOT NULL,
    payload      TEXT    NOT NULL,
    subject      TEXT,
    dedup_key    TEXT,
    ordering_key TEXT,
    seq          INTEGER,
    id_given     INTEGER NOT NULL DEFAULT 0 CHECK (id_given IN (0, 1)),
    attempts     INTEGER NOT NULL DEFAULT 0,
    lease_token  TEXT,
    last_error   TEXT,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (state, due_at, id)
) STRICT, WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS "outbox_dedup" ON "outbox" (dedup_key) WHERE dedup_key IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS "outbox_given_id" ON "outbox" (id) WHERE id_given = 1;
CREATE INDEX IF NOT EXISTS "outbox_ordering" ON "outbox" (ordering_key, seq) WHERE ordering_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS "outbox_dead_id" ON "outbox" (id) WHERE state = 'dead';

-- Inbox table "inbox", from workers-outbox. One row per processed message key:
-- written in the same batch as the message's effect, so an effect happens once.
CREATE TABLE IF NOT EXISTS "inbox" (
    key     TEXT    NOT NULL PRIMARY KEY,
    subject TEXT,
    seen_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "inbox_seen_at" ON "inbox" (seen_at);
CREATE INDEX IF NOT EXISTS "inbox_subject" ON "inbox" (subject) WHERE subject IS NOT NULL;
