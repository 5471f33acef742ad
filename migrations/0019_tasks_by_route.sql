-- ListTasks (A2A, the dashboard): a route's A2A tasks newest first by their
-- last update, and how many match, read from this index alone — the owner
-- and state a list filters on are in it, so neither a page nor the count
-- touches the table's rows, and a page after another starts where the last
-- ended (a keyset) however deep it is. Without it each call sorted and
-- counted the whole table: 1.2 s for a page of one at 1.17 million tasks.
CREATE INDEX tasks_route_updated ON tasks (route, updated_at, id, owner, state) WHERE source = 'a2a';

-- A context's tasks (ListTasks with `contextId`, a follow-up's owner check):
-- dropped in 0008 to save a page per task commit, back because without it
-- such a list scanned the route's tasks (58 ms at 1,000,000 stored), and
-- by its last update, so a page of a long context is read in order too
-- (10 ms for a page of a 1,000-task context when sorted). Context ids are
-- UUIDv7, so a new context's entries land together at the end, and a
-- task's state changes move its entry only among its context's.
CREATE INDEX tasks_context ON tasks (context_id, updated_at, id) WHERE source = 'a2a';
