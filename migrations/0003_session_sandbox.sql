-- What the tool jail enforces for each session on this host ("full",
-- "partial: missing …", "unjailed (…)", or "no native tools"), recorded when
-- the session is created so `status` never claims protection that was not in force.
ALTER TABLE sessions ADD COLUMN sandbox TEXT NOT NULL DEFAULT '';
