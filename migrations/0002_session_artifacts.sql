-- The artifacts installed for each session (name, version, runtime,
-- implementation, sha256, origin) as a JSON array, so `status` shows what a
-- session ran with even after it ended.
ALTER TABLE sessions ADD COLUMN artifacts_json TEXT NOT NULL DEFAULT '[]';
