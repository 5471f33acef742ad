-- A conversation goes with its context's last task (0013), but the trigger's
-- check for another task of the context named neither `source` nor anything
-- else an index covers: `tasks_context` is partial (`WHERE source = 'a2a'`,
-- 0019), so SQLite could not use it and scanned the task table, once for
-- every deleted task whose context still has a conversation. An agent route
-- with a conversation per context made each retention delete a walk of the
-- table: 200 deletes took 2 s at 100,000 tasks stored, every commit waiting
-- behind them (BENCHMARKS.md, issue 36). Conversations belong to A2A tasks
-- only (an agent keeps one for a task it was sent over A2A; other tasks have
-- the empty route), so the check names `source` and reads the index, and
-- other tasks' deletes skip the trigger.
DROP TRIGGER conversation_after_last_task;
CREATE TRIGGER conversation_after_last_task AFTER DELETE ON tasks
WHEN OLD.source = 'a2a'
BEGIN
    DELETE FROM conversations
    WHERE route = OLD.route AND context_id = OLD.context_id
      AND NOT EXISTS (SELECT 1 FROM tasks
                      WHERE context_id = OLD.context_id AND route = OLD.route
                        AND source = 'a2a');
END;
