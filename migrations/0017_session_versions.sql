-- The versions a session has run (an upgrade in place keeps its id and
-- name): written when it is first upgraded (its first version too) and at
-- each upgrade or rollback after. A rollback reads its start request back.
CREATE TABLE session_versions (
    session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    capsule      TEXT NOT NULL,
    version      TEXT NOT NULL,
    manifest     TEXT NOT NULL,
    request_json TEXT NOT NULL,
    since        TEXT NOT NULL,
    why          TEXT NOT NULL,                    -- 'start' | 'upgrade' | 'rollback'
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
