-- How many A2A tasks each route has, per client (owner) and state, kept by
-- triggers in the transaction of every insert, state change and delete:
-- ListTasks' `totalSize` for a route is a sum over a few rows here instead
-- of a count of the route's tasks, so it costs the same at ten tasks and at
-- a million. (A list filtered by context still counts its tasks: a
-- context's are few.) Cascaded deletes (a session's tasks) fire the
-- delete trigger too.
CREATE TABLE task_counts (
    route TEXT NOT NULL,
    owner TEXT NOT NULL,
    state TEXT NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (route, owner, state)
) WITHOUT ROWID;

INSERT INTO task_counts (route, owner, state, n)
    SELECT route, owner, state, COUNT(*) FROM tasks WHERE source = 'a2a' GROUP BY route, owner, state;

CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks WHEN NEW.source = 'a2a'
BEGIN
    INSERT INTO task_counts (route, owner, state, n) VALUES (NEW.route, NEW.owner, NEW.state, 1)
        ON CONFLICT (route, owner, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks WHEN OLD.source = 'a2a'
BEGIN
    UPDATE task_counts SET n = n - 1
        WHERE route = OLD.route AND owner = OLD.owner AND state = OLD.state;
END;

CREATE TRIGGER task_counts_update AFTER UPDATE OF state, route, owner, source ON tasks
    WHEN (OLD.source = 'a2a' OR NEW.source = 'a2a')
     AND (OLD.state IS NOT NEW.state OR OLD.route IS NOT NEW.route
          OR OLD.owner IS NOT NEW.owner OR OLD.source IS NOT NEW.source)
BEGIN
    UPDATE task_counts SET n = n - 1
        WHERE OLD.source = 'a2a' AND route = OLD.route AND owner = OLD.owner AND state = OLD.state;
    INSERT INTO task_counts (route, owner, state, n)
        SELECT NEW.route, NEW.owner, NEW.state, 1 WHERE NEW.source = 'a2a'
        ON CONFLICT (route, owner, state) DO UPDATE SET n = n + 1;
END;
