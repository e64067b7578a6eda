-- The skill catalogue and the agents' version history (issue 10).
--
-- skills: (org, name) → the skill's settings; org '' holds the shared
-- skills. Skills that agents offered before skills were entities are
-- created empty (no description, template, tools or config; version 1), in
-- the agent's org (a shared agent's in the shared catalogue), so every
-- stored agent still names only known skills.
--
-- agent_versions: a copy of every version of every agent, written by a
-- trigger in the same transaction as the agents row, and dropped with the
-- agent. Today's agents become their first recorded version.
-- +goose Up
CREATE TABLE skills (
    org             text NOT NULL DEFAULT '',
    name            text NOT NULL,
    description     text NOT NULL DEFAULT '',
    required_tools  text[] NOT NULL DEFAULT '{}',
    prompt_template text NOT NULL DEFAULT '',
    config          jsonb NOT NULL DEFAULT '{}',
    version         bigint NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (org, name)
);
CREATE INDEX skills_name_org ON skills ((name COLLATE "C"), (org COLLATE "C"));

INSERT INTO skills (org, name, version, created_at, updated_at)
SELECT DISTINCT a.org, s.name, 1, now(), now()
FROM agents a, unnest(a.skills) AS s(name)
ON CONFLICT DO NOTHING;

CREATE TABLE agent_versions (
    org     text NOT NULL,
    name    text NOT NULL,
    version bigint NOT NULL,
    data    bytea NOT NULL, -- agentmesh.v1.Agent
    PRIMARY KEY (org, name, version)
);

INSERT INTO agent_versions (org, name, version, data) SELECT org, name, version, data FROM agents;

-- +goose StatementBegin
CREATE FUNCTION agent_versions_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM agent_versions WHERE org = OLD.org AND name = OLD.name;
        RETURN OLD;
    END IF;
    INSERT INTO agent_versions (org, name, version, data) VALUES (NEW.org, NEW.name, NEW.version, NEW.data)
        ON CONFLICT (org, name, version) DO UPDATE SET data = EXCLUDED.data;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER agents_record_versions AFTER INSERT OR UPDATE OR DELETE ON agents
    FOR EACH ROW EXECUTE FUNCTION agent_versions_record();

-- +goose Down
DROP TRIGGER agents_record_versions ON agents;
DROP FUNCTION agent_versions_record();
DROP TABLE agent_versions;
DROP TABLE skills;
