-- Fleet registry "{table}", from workers-outbox: one row per outbox of a member (a Durable Object, a
-- tenant's database), written by that outbox's own drains (FleetMember) and read by the console's
-- fleet view. backlog and dead are counted up to the reporter's cap plus one (more reads as "cap+");
-- oldest_due_at, in Unix ms, is when the most overdue message fell due (null: none due); last_error is
-- the error of the first message in line that failed, else the latest dead letter's; reported_at, in
-- Unix ms, when the member last wrote its row.
CREATE TABLE IF NOT EXISTS "{table}" (
    member        TEXT    NOT NULL,
    outbox        TEXT    NOT NULL,
    backlog       INTEGER NOT NULL,
    dead          INTEGER NOT NULL,
    oldest_due_at INTEGER,
    last_error    TEXT,
    reported_at   INTEGER NOT NULL,
    PRIMARY KEY (member, outbox)
) STRICT, WITHOUT ROWID;
-- The members with dead letters (read backwards: most first); the members with a message due.
CREATE INDEX IF NOT EXISTS "{table}_dead" ON "{table}" (dead, member, outbox) WHERE dead > 0;
CREATE INDEX IF NOT EXISTS "{table}_oldest_due" ON "{table}" (oldest_due_at, member, outbox) WHERE oldest_due_at IS NOT NULL;
