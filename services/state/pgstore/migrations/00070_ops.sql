-- Keys, schedules and webhooks kept through the API (issue 31).
--
-- Each is a versioned record: (id) → org, version and the protobuf
-- (api_keys: bus.v1.KeyRecord, the key's SHA-256 and never its secret;
-- schedules: agentmesh.v1.Schedule; webhook_endpoints:
-- bus.v1.WebhookEndpointRecord, with its signing secrets). hidden marks a
-- revoked key, which lists leave out unless asked.
--
-- webhook_deliveries: the delivery log, one row per delivery (the
-- agentmesh.v1.WebhookDelivery of its last try), dropped with its endpoint.
-- +goose Up
CREATE TABLE api_keys (
    id      text PRIMARY KEY,
    org     text NOT NULL,
    version bigint NOT NULL,
    hidden  boolean NOT NULL DEFAULT false,
    data    bytea NOT NULL
);
CREATE INDEX api_keys_org ON api_keys (org, id);

CREATE TABLE schedules (
    id      text PRIMARY KEY,
    org     text NOT NULL,
    version bigint NOT NULL,
    hidden  boolean NOT NULL DEFAULT false,
    data    bytea NOT NULL
);
CREATE INDEX schedules_org ON schedules (org, id);

CREATE TABLE webhook_endpoints (
    id      text PRIMARY KEY,
    org     text NOT NULL,
    version bigint NOT NULL,
    hidden  boolean NOT NULL DEFAULT false,
    data    bytea NOT NULL
);
CREATE INDEX webhook_endpoints_org ON webhook_endpoints (org, id);

CREATE TABLE webhook_deliveries (
    id          text PRIMARY KEY,
    org         text NOT NULL,
    endpoint_id text NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    attempts    integer NOT NULL,
    data        bytea NOT NULL
);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id DESC);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
DROP TABLE schedules;
DROP TABLE api_keys;
