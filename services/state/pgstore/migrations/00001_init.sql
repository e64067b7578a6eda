-- +goose Up
CREATE TABLE tasks (
    id              text PRIMARY KEY,
    org             text NOT NULL,
    agent           text NOT NULL,
    status          smallint NOT NULL,
    attempt         integer NOT NULL,
    last_event_seq  bigint NOT NULL,
    idempotency_key text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    data            bytea NOT NULL -- agentmesh.v1.Task
);
CREATE UNIQUE INDEX tasks_org_idempotency_key ON tasks (org, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX tasks_org_id ON tasks (org, id DESC);
CREATE INDEX tasks_agent_id ON tasks (agent, id DESC);
CREATE INDEX tasks_status_id ON tasks (status, id DESC);
CREATE INDEX tasks_status_updated_at ON tasks (status, updated_at);
CREATE INDEX tasks_created_at ON tasks (created_at);

CREATE TABLE task_events (
    task_id text NOT NULL REFERENCES tasks (id),
    seq     bigint NOT NULL,
    type    smallint NOT NULL,
    time    timestamptz NOT NULL,
    data    bytea NOT NULL, -- agentmesh.v1.TaskEvent
    PRIMARY KEY (task_id, seq)
);

CREATE TABLE agents (
    name       text PRIMARY KEY,
    version    bigint NOT NULL,
    skills     text[] NOT NULL DEFAULT '{}',
    updated_at timestamptz NOT NULL,
    data       bytea NOT NULL -- agentmesh.v1.Agent
);
CREATE INDEX agents_skills ON agents USING gin (skills);

-- +goose Down
DROP TABLE agents;
DROP TABLE task_events;
DROP TABLE tasks;
