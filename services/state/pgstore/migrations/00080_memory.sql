-- What agents keep (issue 30, docs/memory.md).
--
-- working_state: the working-state entries written with persist (the hot
-- copy is the state service's JetStream bucket): (org, scope, scope_id,
-- key) → revision, expiry and the agentmesh.bus.v1.StateRecord.
--
-- memories: long-term memories, (org, id) → the agentmesh.v1.Memory and its
-- unit-length embedding (float32 little-endian; pgvector is not required).
-- seq orders each org's changes: it comes from the org's row in
-- memory_counters, taken with a row lock held to the commit, so an org's
-- changes commit in seq order and a reader that saw seq n has seen every
-- change before it. A deleted memory keeps its row (deleted_at set, data
-- and embedding dropped) until retention forgets it, so that the state
-- service's search index learns of the deletion; memory_forgotten keeps,
-- per org, the highest seq forgotten (an older cursor must read again).
--
-- threads: conversations, (org, id) → revision and the agentmesh.v1.Thread.
-- +goose Up
CREATE TABLE working_state (
    org        text NOT NULL,
    scope      text NOT NULL,
    scope_id   text NOT NULL,
    key        text NOT NULL,
    revision   bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    data       bytea NOT NULL, -- agentmesh.bus.v1.StateRecord
    PRIMARY KEY (org, scope, scope_id, key)
);
CREATE INDEX working_state_expires ON working_state (expires_at);

CREATE TABLE memory_counters (
    org text PRIMARY KEY,
    seq bigint NOT NULL
);

CREATE TABLE memory_forgotten (
    org text PRIMARY KEY,
    seq bigint NOT NULL
);

CREATE TABLE memories (
    org        text NOT NULL,
    id         text NOT NULL,
    seq        bigint NOT NULL,
    scope      text NOT NULL,
    scope_id   text NOT NULL,
    tags       text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL,
    deleted_at timestamptz,
    data       bytea, -- agentmesh.v1.Memory; NULL once deleted
    embedding  bytea, -- float32 little-endian, unit length; NULL once deleted
    PRIMARY KEY (org, id)
);
CREATE UNIQUE INDEX memories_org_seq ON memories (org, seq);
CREATE INDEX memories_created ON memories (created_at) WHERE deleted_at IS NULL;
CREATE INDEX memories_deleted ON memories (deleted_at) WHERE deleted_at IS NOT NULL;
CREATE INDEX memories_tags ON memories USING gin (tags) WHERE deleted_at IS NULL;

CREATE TABLE threads (
    org        text NOT NULL,
    id         text NOT NULL,
    revision   bigint NOT NULL,
    updated_at timestamptz NOT NULL,
    data       bytea NOT NULL, -- agentmesh.v1.Thread
    PRIMARY KEY (org, id)
);
CREATE INDEX threads_org_updated ON threads (org, updated_at DESC, id);

-- +goose Down
DROP TABLE threads;
DROP TABLE memories;
DROP TABLE memory_forgotten;
DROP TABLE memory_counters;
DROP TABLE working_state;
