-- One statement per task event: the event row is inserted (with its sequence
-- number) only while the task has not ended, and these triggers keep the task
-- row in step with its log, atomically with the insert. An A2A task's first
-- event (submitted) comes with the task row.
CREATE TRIGGER task_first_event AFTER INSERT ON tasks WHEN NEW.source = 'a2a'
BEGIN
    INSERT INTO task_events (task_id, seq, body_json, at)
    VALUES (NEW.id, 1, '{"type":"status","state":"submitted"}', NEW.created_at);
END;

CREATE TRIGGER task_status_event AFTER INSERT ON task_events
WHEN json_extract(NEW.body_json, '$.type') = 'status' AND NEW.seq > 1
BEGIN
    UPDATE tasks SET
        state = json_extract(NEW.body_json, '$.state'),
        error = CASE WHEN json_extract(NEW.body_json, '$.state') IN ('failed', 'rejected')
                     THEN json_extract(NEW.body_json, '$.message') ELSE error END,
        updated_at = NEW.at,
        ended_at = CASE WHEN json_extract(NEW.body_json, '$.state')
                             IN ('completed', 'failed', 'canceled', 'rejected')
                        THEN NEW.at ELSE ended_at END
    WHERE id = NEW.task_id;
END;

-- The whole answer (not a chunk of it) is kept with the task.
CREATE TRIGGER task_answer_event AFTER INSERT ON task_events
WHEN json_extract(NEW.body_json, '$.type') = 'artifact'
     AND json_extract(NEW.body_json, '$.artifact_id') = 'answer'
     AND NOT COALESCE(json_extract(NEW.body_json, '$.append'), 0)
BEGIN
    UPDATE tasks SET answer = json_extract(NEW.body_json, '$.text'), updated_at = NEW.at
    WHERE id = NEW.task_id;
END;
