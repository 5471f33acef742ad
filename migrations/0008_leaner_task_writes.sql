-- Fewer pages per A2A task commit: every page a commit touches is another
-- frame written to the WAL.
--
-- The task writer (daemon/src/store/writer.rs) writes an A2A task's first
-- event (submitted) itself, with the task row, as it writes the rest of the
-- log (0007): a trigger on the task insert made SQLite keep a statement
-- journal for every task it recorded.
DROP TRIGGER task_first_event;

-- No query used these two: listing tasks by context scans (its filters are
-- optional), and the start-up queries for tasks in a given state ask for a
-- subset of the live states, which SQLite cannot prove is covered by the
-- partial index. Each cost a page per new task (tasks_live two changes).
DROP INDEX tasks_context;
DROP INDEX tasks_live;
