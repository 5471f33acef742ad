-- SendMessage is idempotent on (route, messageId): the task writer looks a
-- message id up on its route before it records a new task, and a retry gets
-- the task the first attempt made. Tasks recorded before this migration
-- have no message id here (their retries are new tasks, as before).
ALTER TABLE tasks ADD COLUMN message_id TEXT;
CREATE INDEX tasks_message ON tasks (route, message_id) WHERE message_id IS NOT NULL;
