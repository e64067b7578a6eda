-- Agents belong to orgs: a name is unique within its org. Agents that
-- existed before (when agents were global) become shared agents (org ''):
-- every org reads them, only a platform key changes them.
-- +goose Up
ALTER TABLE agents ADD COLUMN org text NOT NULL DEFAULT '';
ALTER TABLE agents DROP CONSTRAINT agents_pkey;
ALTER TABLE agents ADD PRIMARY KEY (org, name);
CREATE INDEX agents_name_org ON agents ((name COLLATE "C"), (org COLLATE "C"));

-- +goose Down
DROP INDEX agents_name_org;
DELETE FROM agents WHERE org <> '';
ALTER TABLE agents DROP CONSTRAINT agents_pkey;
ALTER TABLE agents ADD PRIMARY KEY (name);
ALTER TABLE agents DROP COLUMN org;
