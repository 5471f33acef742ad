-- Schedules: each fires a normal A2A task at its ticks. A tick is recorded
-- (last_tick) in the same transaction as the task it creates, whose
-- message id is the schedule's id and the tick, so a tick fires once across
-- restarts and kill -9.
CREATE TABLE schedules (
    id           TEXT PRIMARY KEY,
    route        TEXT NOT NULL,
    name         TEXT NOT NULL,
    origin       TEXT NOT NULL,               -- 'api' | 'manifest'
    text         TEXT NOT NULL,
    context_id   TEXT,
    cron         TEXT,
    tz           TEXT,
    every        TEXT,
    at           TEXT,
    missed       TEXT NOT NULL,               -- 'skip' | 'run_once'
    overlap      TEXT NOT NULL,               -- 'skip' | 'queue'
    paused       INTEGER NOT NULL DEFAULT 0,
    created_ms   INTEGER NOT NULL,
    last_tick_ms INTEGER,                     -- the last tick fired or passed over
    last_task_id TEXT,
    fired        INTEGER NOT NULL DEFAULT 0,
    skipped      INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    UNIQUE (route, name)
);
