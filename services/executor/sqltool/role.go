package sqltool

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrPrivilegedRole is returned (wrapped, with what the role can do) when
// the role of Config.URL has powers an agent's SQL must not have and
// Config.AllowPrivilegedRole is off.
var ErrPrivilegedRole = errors.New("the database role is too powerful for sql_query")

// roleQuery reads what the connection's role can do. Each predefined role
// is looked up before pg_has_role is asked (it errors on a missing role).
const roleQuery = `
SELECT r.rolname, r.rolsuper, r.rolcreaterole,
  coalesce((SELECT string_agg(p, ', ' ORDER BY p) FROM unnest(ARRAY['pg_read_server_files', 'pg_write_server_files', 'pg_execute_server_program']) AS p
    WHERE EXISTS (SELECT 1 FROM pg_roles WHERE rolname = p) AND pg_has_role(current_user, p, 'MEMBER')), ''),
  coalesce((SELECT format('%s %I.%I', CASE WHEN pg_has_role(c.relowner, 'USAGE') THEN 'owns' ELSE 'may change' END, n.nspname, c.relname)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
      AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%' AND n.nspname NOT LIKE 'pg\_temp%'
      AND (pg_has_role(c.relowner, 'USAGE')
        OR CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(c.oid, 'UPDATE')
                ELSE has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE') END)
    LIMIT 1), ''),
  coalesce((SELECT format('CREATE on schema %I', n.nspname) FROM pg_namespace n
    WHERE has_schema_privilege(n.oid, 'CREATE') AND n.nspname NOT LIKE 'pg\_temp%' AND n.nspname NOT LIKE 'pg\_toast%' LIMIT 1), ''),
  has_database_privilege(current_database(), 'CREATE')
FROM pg_roles r WHERE r.rolname = current_user`

// checkRole refuses a connection whose role is a superuser, a member of
// a role that reads or writes the server's files or runs programs on it,
// or can create roles — and, when the tool is read-only, a role that can
// write (INSERT/UPDATE/DELETE/TRUNCATE or owner of a table or sequence,
// CREATE in a schema or the database). It runs on every new connection
// (and so at start), unless the operator allowed a privileged role.
func (t *Tool) checkRole(ctx context.Context, conn *pgx.Conn) error {
	if t.cfg.AllowPrivilegedRole {
		return nil
	}
	var (
		name              string
		super, createRole bool
		fileRoles, writes string
		schemaCreate      string
		dbCreate          bool
	)
	if err := conn.QueryRow(ctx, roleQuery).Scan(&name, &super, &createRole, &fileRoles, &writes, &schemaCreate, &dbCreate); err != nil {
		return fmt.Errorf("check the database role: %w", err)
	}
	var why []string
	if super {
		why = append(why, "is a superuser (it can read and write the server's files and run programs on it)")
	}
	if fileRoles != "" && !super {
		why = append(why, "is a member of "+fileRoles)
	}
	if createRole && !super {
		why = append(why, "can create roles")
	}
	if !t.cfg.ReadWrite && !super {
		var w []string
		if writes != "" {
			w = append(w, writes)
		}
		if schemaCreate != "" {
			w = append(w, schemaCreate)
		}
		if dbCreate {
			w = append(w, "CREATE on the database")
		}
		if len(w) > 0 {
			why = append(why, "can write while sql_query is read-only ("+strings.Join(w, "; ")+")")
		}
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: role %q %s. Give sql_query a role that only reads (GRANT SELECT …; REVOKE CREATE ON SCHEMA public FROM PUBLIC), or accept the risk with AGENTMESH_SQL_ALLOW_PRIVILEGED_ROLE=true (Config.AllowPrivilegedRole)",
		ErrPrivilegedRole, name, strings.Join(why, "; "))
}
