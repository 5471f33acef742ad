-- Retention deletes ended A2A tasks oldest first, in batches: an index of
-- ended tasks by when they ended lets each batch take its 200 from the
-- front instead of sorting every ended task again (which made a round of
-- pruning quadratic in the tasks it deletes).
CREATE INDEX tasks_ended ON tasks (ended_at, id) WHERE source = 'a2a' AND ended_at IS NOT NULL;
