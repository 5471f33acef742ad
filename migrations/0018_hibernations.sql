-- Sessions hibernated after `lifecycle.hibernate_after` idle: what roostd
-- needs at start-up to keep each one's route and inbox open without staging
-- it (the inbox's depth and double-texting rule). The session's row stays
-- 'running' (its states are fixed by 0001's CHECK): a row here makes it read
-- 'hibernated', and start-up leaves it alone. Written with a 'hibernated'
-- event; removed when the session wakes, runs again or ends.
CREATE TABLE hibernations (
    session_id   TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    depth        INTEGER NOT NULL,
    same_context TEXT NOT NULL,                    -- 'queue' | 'reject' | 'interrupt'
    since        TEXT NOT NULL
) WITHOUT ROWID;
