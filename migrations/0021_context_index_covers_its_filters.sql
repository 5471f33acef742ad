-- A context's list (ListTasks with `contextId`) filters on its route and
-- owner too, and counts what matches: with `tasks_context` holding only
-- (context_id, updated_at, id) every task of the context was read from the
-- table to check them, so the count of a 1,000-task context read 1,000
-- rows (4–5.6 ms at 1,000,000 stored; BENCHMARKS.md, issue 36). The route,
-- owner and state are in the index now, as in `tasks_route_updated`, and
-- `source` (the statements name it, and the index's own condition does not
-- let SQLite leave it out): the count, a follow-up's owner check and a
-- page's filters read the index alone, and a page reads the table only for
-- the tasks it returns. A task's end already moves its entry (its
-- `updated_at`), so the state in it costs no page more.
DROP INDEX tasks_context;
CREATE INDEX tasks_context ON tasks (context_id, updated_at, id, route, owner, state, source) WHERE source = 'a2a';
