-- A2A tasks: a task and its first message are committed before the gateway
-- acknowledges it; every status and artifact event is appended to a per-task
-- log with a sequence number, which streams and re-subscriptions replay.
ALTER TABLE tasks ADD COLUMN route TEXT NOT NULL DEFAULT '';   -- the session's route when accepted
ALTER TABLE tasks ADD COLUMN message_json TEXT;                -- the A2A message that created it
ALTER TABLE tasks ADD COLUMN answer TEXT;                      -- the final answer (the task's artifact)

CREATE INDEX tasks_context ON tasks (context_id);
CREATE INDEX tasks_live ON tasks (session_id) WHERE state IN ('submitted', 'working', 'input-required');

CREATE TABLE task_events (
    task_id   TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq       INTEGER NOT NULL,
    body_json TEXT NOT NULL,                                   -- a TaskEvent as roostd records it
    at        TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;
