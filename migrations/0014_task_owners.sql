-- Who sent each A2A task: the client whose route token it came with
-- (a2a.routes.<name>.clients), '' for a route's single token, roostd's
-- token or an open route. Reads, lists, contexts and de-duplication are
-- scoped to it (issue 32).
ALTER TABLE tasks ADD COLUMN owner TEXT NOT NULL DEFAULT '';
DROP INDEX tasks_message;
CREATE INDEX tasks_message ON tasks (route, owner, message_id) WHERE message_id IS NOT NULL;
