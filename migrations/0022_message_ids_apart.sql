-- De-duplication (SendMessage is idempotent on a route, owner and message
-- id) reads its own table instead of an index on `tasks`. Message ids are
-- the client's (UUIDv4 in the SDKs), random to a task's age, so each
-- retention delete of a task removed an entry from a random page of
-- `tasks_message`: 29 µs and 7.3 KiB written (WAL and checkpoint) of the
-- 77 µs and 21 KiB a delete cost at 300,000 tasks (BENCHMARKS.md, issue
-- 36). Here an entry names its task, and a task's delete leaves it:
-- a lookup joins the task, so an entry whose task is gone finds nothing
-- (the message is new again, as it was when its task was deleted), and
-- its next task takes the entry over. Retention clears such entries later
-- in key order, many to a page, after a reader has found which they are
-- (`Store::sweep_message_ids`). `tasks.message_id` is no longer written
-- (the message, its id with it, is in `message_json`): the column stays,
-- with the ids of tasks recorded before, until they are pruned.
CREATE TABLE task_messages (
    route      TEXT NOT NULL,
    owner      TEXT NOT NULL,
    message_id TEXT NOT NULL,
    task_id    TEXT NOT NULL,
    PRIMARY KEY (route, owner, message_id)
) WITHOUT ROWID;

-- The first task of each message (ids are UUIDv7: by time), the one a
-- retry got before. More than one there is only if de-duplication was off
-- when they came.
INSERT INTO task_messages (route, owner, message_id, task_id)
    SELECT route, owner, message_id, MIN(id) FROM tasks
    WHERE source = 'a2a' AND message_id IS NOT NULL
    GROUP BY route, owner, message_id;

DROP INDEX tasks_message;
