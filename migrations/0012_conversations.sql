-- An agent's conversation per A2A context (`context.conversation:
-- per_context`): the driver messages of the context's completed tasks, so
-- the next task in the context (also after a restart) starts from them; the
-- driver's continuation id and how many of the messages it has seen; the
-- context's size in tokens at the last turn (compaction starts from it).
-- Keyed by route (the session name) and context id; a row goes when its
-- context has no task left (retention, `roostctl rm`).
CREATE TABLE conversations (
    route              TEXT NOT NULL,
    context_id         TEXT NOT NULL,
    messages           TEXT NOT NULL,      -- JSON array of driver messages (docs/drivers.md)
    continuation_id    TEXT,
    continuation_acked INTEGER NOT NULL DEFAULT 0,
    context_tokens     INTEGER NOT NULL DEFAULT 0,
    updated_at         TEXT NOT NULL,
    PRIMARY KEY (route, context_id)
) WITHOUT ROWID;
