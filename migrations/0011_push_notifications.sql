-- A2A push notifications: a task's configs (where to send its updates, with
-- what credentials), and an outbox of deliveries: one row per (event,
-- config), written by the task writer in the same transaction as the event
-- (daemon/src/store/writes.rs), deleted once delivered or given up. Both go
-- with their task (retention, `roostctl rm`).
CREATE TABLE push_configs (
    task_id          TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    id               TEXT NOT NULL,
    url              TEXT NOT NULL,
    token            TEXT,                 -- sent as X-A2A-Notification-Token
    auth_scheme      TEXT,                 -- sent as Authorization: <scheme> <credentials>
    auth_credentials TEXT,
    created_at       TEXT NOT NULL,
    PRIMARY KEY (task_id, id)
) WITHOUT ROWID;

CREATE TABLE push_outbox (
    id         INTEGER PRIMARY KEY,
    task_id    TEXT NOT NULL,
    config_id  TEXT NOT NULL,
    event_seq  INTEGER NOT NULL,
    attempts   INTEGER NOT NULL DEFAULT 0,
    next_at    INTEGER NOT NULL,           -- unix milliseconds: when to try next
    last_error TEXT,
    FOREIGN KEY (task_id, config_id) REFERENCES push_configs (task_id, id) ON DELETE CASCADE
);
-- What is due, oldest first; and each config's deliveries in log order.
CREATE INDEX push_outbox_due ON push_outbox (next_at);
CREATE INDEX push_outbox_config ON push_outbox (task_id, config_id, event_seq);
