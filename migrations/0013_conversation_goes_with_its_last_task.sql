-- A conversation goes in the same statement as its context's last task,
-- however the task is deleted (retention, `roostctl rm`, a session's delete
-- cascading): two index probes per deleted task, instead of the writer
-- looking over every conversation after each delete (0012 did).
CREATE TRIGGER conversation_after_last_task AFTER DELETE ON tasks
WHEN OLD.route IS NOT NULL
BEGIN
    DELETE FROM conversations
    WHERE route = OLD.route AND context_id = OLD.context_id
      AND NOT EXISTS (SELECT 1 FROM tasks WHERE context_id = OLD.context_id AND route = OLD.route);
END;
