-- The A2A version of the client that made a push config: what its receiver
-- is sent. '1.0': each event as a StreamResponse; '0.3': the whole task in
-- 0.3's shape after each event (what 0.3's SDKs send and read).
ALTER TABLE push_configs ADD COLUMN version TEXT NOT NULL DEFAULT '1.0';
