-- The task writer (daemon/src/store/writer.rs) writes an A2A task's first
-- event (submitted) itself, with the task row, as it writes the rest of the
-- log (0007): a trigger on the task insert made SQLite keep a statement
-- journal for every task it recorded.
DROP TRIGGER task_first_event;
