-- Delegation (issue 9): the root of each task's tree, for ListTasks'
-- root_task_id filter. A trigger sets it on insert from the row's parent
-- (the parent's root, or the task's own id when it has none), the same
-- rule state applies to Task.root_task_id, so the insert statements need
-- not know the column. Existing rows are filled by walking their parents.
-- +goose Up
ALTER TABLE tasks ADD COLUMN root_task_id text;

-- +goose StatementBegin
CREATE FUNCTION tasks_set_root() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.root_task_id IS NULL THEN
    IF NEW.parent_task_id IS NULL THEN
      NEW.root_task_id := NEW.id;
    ELSE
      SELECT COALESCE(root_task_id, id) INTO NEW.root_task_id FROM tasks WHERE id = NEW.parent_task_id;
      IF NEW.root_task_id IS NULL THEN
        NEW.root_task_id := NEW.parent_task_id;
      END IF;
    END IF;
  END IF;
  RETURN NEW;
END $$;
-- +goose StatementEnd
CREATE TRIGGER tasks_set_root BEFORE INSERT ON tasks FOR EACH ROW EXECUTE FUNCTION tasks_set_root();

WITH RECURSIVE tree(id, root) AS (
  SELECT id, id FROM tasks WHERE parent_task_id IS NULL
  UNION ALL
  SELECT t.id, tree.root FROM tasks t JOIN tree ON t.parent_task_id = tree.id
)
UPDATE tasks SET root_task_id = tree.root FROM tree WHERE tasks.id = tree.id;
CREATE INDEX tasks_root_task_id ON tasks (root_task_id, id DESC);

-- +goose Down
DROP INDEX tasks_root_task_id;
DROP TRIGGER tasks_set_root ON tasks;
DROP FUNCTION tasks_set_root();
ALTER TABLE tasks DROP COLUMN root_task_id;
