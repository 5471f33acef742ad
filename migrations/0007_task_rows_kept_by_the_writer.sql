-- The task writer (daemon/src/store/writer.rs) keeps an A2A task's row in
-- step with its log itself, in the same transaction as each event: it knows
-- each event's kind, so SQLite no longer parses every event's JSON to find
-- out. The task's first event still comes with the task row (0006).
DROP TRIGGER task_status_event;
DROP TRIGGER task_answer_event;
