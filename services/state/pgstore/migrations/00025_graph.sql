-- Dependencies, tags, sub-tasks and timing (issue 8): filter columns kept
-- current by every write, from the data column's Task. Rows written before
-- this migration have NULLs: they match no tag, priority or parent filter,
-- and GetMetrics counts them only while they are unfinished.
-- +goose Up
ALTER TABLE tasks
    ADD COLUMN priority       smallint,
    ADD COLUMN tags           text[],
    ADD COLUMN parent_task_id text,
    ADD COLUMN waiting_on     text[],
    ADD COLUMN finished_at    timestamptz;
CREATE INDEX tasks_tags ON tasks USING gin (tags);
CREATE INDEX tasks_waiting_on ON tasks USING gin (waiting_on);
CREATE INDEX tasks_parent_task_id ON tasks (parent_task_id, id DESC) WHERE parent_task_id IS NOT NULL;
CREATE INDEX tasks_org_finished_at ON tasks (org, finished_at);

-- +goose Down
DROP INDEX tasks_org_finished_at;
DROP INDEX tasks_parent_task_id;
DROP INDEX tasks_waiting_on;
DROP INDEX tasks_tags;
ALTER TABLE tasks
    DROP COLUMN priority,
    DROP COLUMN tags,
    DROP COLUMN parent_task_id,
    DROP COLUMN waiting_on,
    DROP COLUMN finished_at;
