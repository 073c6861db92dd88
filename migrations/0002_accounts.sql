-- The example Worker's own table: accounts created by POST /signup.
CREATE TABLE IF NOT EXISTS accounts (
    id         TEXT    NOT NULL PRIMARY KEY,
    email      TEXT    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
) STRICT;
