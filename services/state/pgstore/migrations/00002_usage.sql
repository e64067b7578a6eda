-- Usage totals of each task, kept current by every write (the same totals
-- as the data column's Task.usage), so GetUsage sums in SQL. Rows written
-- before this migration have NULLs; Usage sums those from their data.
-- +goose Up
ALTER TABLE tasks
    ADD COLUMN prompt_tokens     bigint,
    ADD COLUMN completion_tokens bigint,
    ADD COLUMN total_tokens      bigint,
    ADD COLUMN cost_usd          double precision;
CREATE INDEX tasks_org_created_at ON tasks (org, created_at);

-- +goose Down
DROP INDEX tasks_org_created_at;
ALTER TABLE tasks
    DROP COLUMN prompt_tokens,
    DROP COLUMN completion_tokens,
    DROP COLUMN total_tokens,
    DROP COLUMN cost_usd;
