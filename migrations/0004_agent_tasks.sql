-- Agent capsules: token use and turns per session (across restarts), and one
-- row per task (a pre-seeded task.md now; A2A tasks later) with its own use.
ALTER TABLE sessions ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN turns INTEGER NOT NULL DEFAULT 0;

CREATE TABLE tasks (
    id            TEXT PRIMARY KEY NOT NULL,            -- tsk_ + 32 hex (UUIDv7)
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    context_id    TEXT NOT NULL,                        -- ctx_ + 32 hex
    source        TEXT NOT NULL,                        -- task_md | a2a
    state         TEXT NOT NULL,                        -- working, completed, failed, canceled, …
    input_bytes   INTEGER NOT NULL,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    turns         INTEGER NOT NULL DEFAULT 0,
    error         TEXT,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    ended_at      TEXT
);

CREATE INDEX tasks_session ON tasks (session_id, created_at);
