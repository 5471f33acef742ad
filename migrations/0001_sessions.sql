-- Sessions: one row per supervised capsule session, kept after it ends.
CREATE TABLE sessions (
    id              TEXT PRIMARY KEY NOT NULL,          -- ses_ + 32 hex (UUIDv7)
    name            TEXT NOT NULL,                      -- route name, unique among live sessions
    capsule         TEXT NOT NULL,
    version         TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN
                      ('starting','running','completed','failed','stopped','interrupted')),
    error           TEXT,
    manifest        TEXT NOT NULL,                      -- absolute path of murmur.yaml
    workdir         TEXT NOT NULL,                      -- what the capsule sees as '.'
    bookkeeping_dir TEXT NOT NULL,
    request_json    TEXT NOT NULL,                      -- the StartRequest, to start it again
    restart_policy  TEXT NOT NULL CHECK (restart_policy IN ('no','on-failure','always')),
    restart_count   INTEGER NOT NULL DEFAULT 0,
    stop_reason     TEXT CHECK (stop_reason IS NULL OR stop_reason IN ('operator','shutdown')),
    created_at      TEXT NOT NULL,
    started_at      TEXT,
    ended_at        TEXT,
    updated_at      TEXT NOT NULL
);

-- Live sessions only: a partial index stays small and is not touched by the
-- transitions of ended rows. Resume/list queries of history scan the table.
CREATE INDEX sessions_live ON sessions (created_at) WHERE state IN ('starting', 'running');
CREATE INDEX sessions_name ON sessions (name);

-- Every state transition, in order, so history survives restarts and crashes.
CREATE TABLE session_events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    state      TEXT NOT NULL,
    detail     TEXT,
    at         TEXT NOT NULL
);

CREATE INDEX session_events_session ON session_events (session_id, seq);

-- Transitions are recorded by the database itself, so each state change is a
-- single statement (one round trip, atomic with its event row).
CREATE TRIGGER sessions_event_insert AFTER INSERT ON sessions
BEGIN
    INSERT INTO session_events (session_id, state, detail, at)
    VALUES (NEW.id, NEW.state, NEW.error, NEW.updated_at);
END;

CREATE TRIGGER sessions_event_update AFTER UPDATE OF state ON sessions
BEGIN
    INSERT INTO session_events (session_id, state, detail, at)
    VALUES (NEW.id, NEW.state,
            CASE WHEN NEW.state = 'running' THEN NULL ELSE NEW.error END,
            NEW.updated_at);
END;
