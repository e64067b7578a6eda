// Package sqltool implements the sql_query tool: the executor runs one
// parameterised SQL statement on a configured Postgres database on an
// agent child's behalf (the child has no network and never sees the
// database URL) and returns the rows as JSON, capped.
//
// Two locks guard writes. Classify (called by the executor's gate through
// Assess before anything runs) sends DML, DDL, multi-statements, session
// changes and side-effecting functions to a person for approval or
// refuses them, as the Policy says. And every statement runs in a
// transaction that is READ ONLY and rolled back — unless the call was
// approved (RunApproved), the statement writes, and the Config allows
// writes (ReadWrite), in which case it runs READ WRITE and is committed.
// The database role in Config.URL should itself only read unless writes
// are wanted. statement_timeout is set for every call; the session is
// reset (DISCARD ALL) after every call so nothing one call sets leaks into
// the next.
package sqltool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentmesh/agentmesh/pkg/tools"
)

// Defaults of Config.
const (
	DefaultStatementTimeout = 10 * time.Second
	DefaultMaxRows          = 1000
	DefaultMaxBytes         = 256 << 10
	DefaultMaxRowBytes      = 1 << 20
)

var (
	// ErrNotConfigured is returned (wrapped) by every call when Config.URL
	// is empty.
	ErrNotConfigured = errors.New("sql_query is not configured on this executor (no database URL)")
	// ErrRefused is returned (wrapped, with the reason) for a statement
	// the classifier or the policy refuses.
	ErrRefused = errors.New("statement refused")
	// ErrNeedsApproval is returned (wrapped) by Run for a statement that
	// needs a person's approval: the gate runs approved calls with
	// RunApproved.
	ErrNeedsApproval = errors.New("statement needs approval")
	// ErrTimeout is returned (wrapped) when the statement outlives
	// statement_timeout.
	ErrTimeout = errors.New("statement timed out")
)

// Config configures a Tool.
type Config struct {
	// URL is the Postgres URL (the role it names should only read unless
	// approved writes are wanted). Empty: the tool is unavailable and
	// every call says so.
	URL string
	// ReadWrite lets approved statements that write run in a READ WRITE
	// transaction that is committed. The zero value (false) is read-only:
	// every statement runs READ ONLY, and Assess refuses writes instead
	// of offering them for approval.
	ReadWrite bool
	// StatementTimeout is set as statement_timeout for every call; 0
	// means DefaultStatementTimeout (10 s).
	StatementTimeout time.Duration
	// MaxRows caps the rows returned (a call's max_rows can only lower
	// it); 0 means DefaultMaxRows (1000).
	MaxRows int
	// MaxBytes caps the JSON returned (columns and rows); 0 means
	// DefaultMaxBytes (256 KiB), which is also the most allowed
	// (tools.MaxOutput).
	MaxBytes int
	// Policy: what happens to statements that need approval. "" means
	// PolicyApprove.
	Policy Policy
	// MaxConns caps the pool; 0 means 4.
	MaxConns int32
	// MaxRowBytes caps one row as the server sends it: a bigger row is
	// never read (the result ends before it, TruncatedBy "max_row_bytes",
	// and the connection is dropped). 0 means DefaultMaxRowBytes (1 MiB).
	// Together with MaxBytes it bounds what one call holds in memory.
	MaxRowBytes int
	// AllowPrivilegedRole accepts a role that New (and every new
	// connection) would otherwise refuse: a superuser, a member of
	// pg_read_server_files, pg_write_server_files or
	// pg_execute_server_program, a role that can create roles, or — when
	// ReadWrite is off — a role that can write.
	AllowPrivilegedRole bool
}

// Tool runs sql_query calls. It is safe for concurrent use.
type Tool struct {
	cfg  Config
	pool *pgxpool.Pool // nil when not configured
}

// New validates cfg and builds the connection pool (connections are
// opened on first use; Ping checks the database now).
func New(ctx context.Context, cfg Config) (*Tool, error) {
	switch cfg.Policy {
	case "":
		cfg.Policy = PolicyApprove
	case PolicyApprove, PolicyRefuse:
	default:
		return nil, fmt.Errorf("sqltool: policy %q: want %q or %q", cfg.Policy, PolicyApprove, PolicyRefuse)
	}
	if cfg.StatementTimeout < 0 || cfg.MaxRows < 0 || cfg.MaxBytes < 0 || cfg.MaxConns < 0 {
		return nil, fmt.Errorf("sqltool: negative StatementTimeout, MaxRows, MaxBytes or MaxConns")
	}
	if cfg.StatementTimeout == 0 {
		cfg.StatementTimeout = DefaultStatementTimeout
	}
	if cfg.MaxRows == 0 {
		cfg.MaxRows = DefaultMaxRows
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 4
	}
	if cfg.MaxRowBytes < 0 {
		return nil, fmt.Errorf("sqltool: negative MaxRowBytes")
	}
	if cfg.MaxRowBytes == 0 {
		cfg.MaxRowBytes = DefaultMaxRowBytes
	}
	if cfg.MaxBytes > tools.MaxOutput {
		return nil, fmt.Errorf("sqltool: MaxBytes %d over tools.MaxOutput (%d)", cfg.MaxBytes, tools.MaxOutput)
	}
	t := &Tool{cfg: cfg}
	if cfg.URL == "" {
		return t, nil
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// The error may quote the URL and its password: say less.
		return nil, fmt.Errorf("sqltool: the database URL does not parse")
	}
	pc.MaxConns = cfg.MaxConns
	// The extended protocol with an unnamed statement: one statement per
	// call (the server refuses more), no statement cache to fill.
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeDescribeExec
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	// The classifier reads strings as the SQL standard does.
	pc.ConnConfig.RuntimeParams["standard_conforming_strings"] = "on"
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "agentmesh-sql_query"
	}
	// No message bigger than a row may arrive: a 300 MB value is refused
	// at its header, before a byte of it is buffered.
	maxRow := cfg.MaxRowBytes
	pc.ConnConfig.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		f := pgproto3.NewFrontend(r, w)
		f.SetMaxBodyLen(maxRow)
		return f
	}
	// The role is checked on every new connection (a role changed later
	// is caught too) and once here, so a misconfiguration stops the start.
	pc.AfterConnect = t.checkRole
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("sqltool: %w", err)
	}
	t.pool = pool
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(cctx); errors.Is(err, ErrPrivilegedRole) {
		pool.Close()
		return nil, err
	}
	// Any other error (the database is down): calls fail, and each new
	// connection is checked before it is used.
	return t, nil
}

// Close closes the pool.
func (t *Tool) Close() {
	if t.pool != nil {
		t.pool.Close()
	}
}

// Assess is the tools.Spec.Assess for this tool's policy and read-only
// setting; the executor registers it: tools.Register("sql_query",
// t.Run, t.Assess).
func (t *Tool) Assess(args json.RawMessage) tools.Assessment {
	return AssessWith(t.cfg.Policy, !t.cfg.ReadWrite)(args)
}

// Args are sql_query's arguments (see the spec in pkg/tools). Params are
// sent as text ($1, $2, …) and Postgres converts them to the parameter's
// type: numbers, strings and booleans as themselves, null as NULL,
// objects and arrays as their JSON text (for json/jsonb parameters; use
// an array literal string such as "{1,2}" for array parameters).
type Args struct {
	Query   string            `json:"query"`
	Params  []json.RawMessage `json:"params,omitempty"`
	MaxRows int               `json:"max_rows,omitempty"`
}

// Result is one call's outcome. Format renders it for the model; the
// executor records Bytes and Truncated in the audit.
type Result struct {
	Columns []string `json:"columns"`
	Rows    [][]any  `json:"rows"`
	// RowCount is len(Rows).
	RowCount int `json:"row_count"`
	// Truncated is set when rows were left out; TruncatedBy says which
	// cap ("max_rows", "max_bytes" or "max_row_bytes").
	Truncated   bool   `json:"truncated"`
	TruncatedBy string `json:"truncated_by,omitempty"`
	// ValuesCut is set when a value longer than a quarter of the byte cap
	// was cut.
	ValuesCut bool `json:"values_cut,omitempty"`
	// Note explains a truncation the model can act on.
	Note string `json:"note,omitempty"`
	// Command is the command tag ("SELECT 3", "UPDATE 2").
	Command string `json:"command,omitempty"`
	// RowsAffected is the command tag's row count.
	RowsAffected int64 `json:"rows_affected"`
	// ReadWrite is set when the statement ran in a committed READ WRITE
	// transaction.
	ReadWrite bool `json:"read_write,omitempty"`
	// Bytes is the size of Format's output, at most Config.MaxBytes.
	Bytes int `json:"-"`
}

// Format renders r as JSON for the model.
func (r *Result) Format() string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return fmt.Sprintf(`{"error":%q}`, err.Error())
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Run is the tools.Func for a call nobody approved: a statement that
// needs approval is refused with ErrNeedsApproval, and the statement runs
// in a READ ONLY transaction that is rolled back.
func (t *Tool) Run(ctx context.Context, _ tools.Env, args json.RawMessage) (string, error) {
	return t.run(ctx, args, false)
}

// RunApproved runs a call a person approved: a statement that writes
// runs in a READ WRITE transaction that is committed when Config.ReadWrite
// allows it. Statements Classify refuses stay refused. (The same
// tools.Func signature, so the gate can hold either.)
func (t *Tool) RunApproved(ctx context.Context, _ tools.Env, args json.RawMessage) (string, error) {
	return t.run(ctx, args, true)
}

func (t *Tool) run(ctx context.Context, raw json.RawMessage, approved bool) (string, error) {
	var a Args
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("sql_query: %w: %w", tools.ErrInvalidArguments, err)
	}
	res, err := t.Query(ctx, a, approved)
	if err != nil {
		return "", err
	}
	return res.Format(), nil
}

// Query runs one call; approved says a person approved it.
func (t *Tool) Query(ctx context.Context, a Args, approved bool) (*Result, error) {
	if t.pool == nil {
		return nil, fmt.Errorf("sql_query: %w", ErrNotConfigured)
	}
	v := Classify(a.Query)
	as := assessment(v, t.cfg.Policy, !t.cfg.ReadWrite)
	switch {
	case as.Deny:
		return nil, fmt.Errorf("sql_query: %w: %s", ErrRefused, as.Reason)
	case as.NeedsApproval && !approved:
		return nil, fmt.Errorf("sql_query: %w: %s", ErrNeedsApproval, as.Reason)
	}
	readWrite := approved && (v.Writes || v.Unknown) && t.cfg.ReadWrite
	params, err := convertParams(a.Params)
	if err != nil {
		return nil, fmt.Errorf("sql_query: %w: %w", tools.ErrInvalidArguments, err)
	}
	maxRows := t.cfg.MaxRows
	if a.MaxRows > 0 && a.MaxRows < maxRows {
		maxRows = a.MaxRows
	}

	// The statement timeout bounds the statement; this bounds the rest
	// (acquiring a connection, BEGIN, COMMIT, DISCARD).
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, t.cfg.StatementTimeout+5*time.Second)
	defer cancel()
	// stalled says the statement outlived the server's own timeout and
	// this call's slack after it (a stalled disk, an overloaded
	// machine): the caller sees the same timeout either way.
	stalled := func() bool { return ctx.Err() == context.DeadlineExceeded && outer.Err() == nil }
	conn, err := t.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("sql_query: connect: %w", err)
	}
	defer func() {
		// Nothing a call set (SET, advisory locks, temp tables,
		// LISTEN) survives it; a connection that cannot be reset is
		// closed.
		if !conn.Conn().IsClosed() {
			if _, err := conn.Exec(ctx, "DISCARD ALL"); err != nil {
				conn.Conn().Close(ctx)
			}
		}
		conn.Release()
	}()
	mode := pgx.ReadOnly
	if readWrite {
		mode = pgx.ReadWrite
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: mode})
	if err != nil {
		return nil, fmt.Errorf("sql_query: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // a no-op after Commit
	ms := strconv.FormatInt(t.cfg.StatementTimeout.Milliseconds(), 10)
	if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $1, true)", ms); err != nil {
		return nil, fmt.Errorf("sql_query: set statement_timeout: %w", err)
	}

	res, err := t.query(ctx, tx, stmt{q: a.Query, params: params, maxRows: maxRows, readWrite: readWrite})
	if err != nil {
		return nil, t.queryError(err, stalled())
	}
	if readWrite {
		if err := tx.Commit(ctx); err != nil {
			return nil, t.queryError(err, stalled())
		}
		res.ReadWrite = true
	}
	res.Bytes = len(res.Format())
	return res, nil
}

// stmt is one statement a call runs: its text and parameters, the rows it
// may return, and whether it may write.
type stmt struct {
	q         string
	params    []any
	maxRows   int
	readWrite bool
}

func (t *Tool) query(ctx context.Context, tx pgx.Tx, st stmt) (*Result, error) {
	q, maxRows, readWrite := st.q, st.maxRows, st.readWrite
	qctx, qcancel := context.WithCancel(ctx)
	defer qcancel()
	args := append([]any{pgx.QueryResultFormats{pgx.TextFormatCode}}, st.params...)
	rows, err := tx.Query(qctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	res := &Result{Columns: []string{}, Rows: [][]any{}}
	fds := rows.FieldDescriptions()
	for _, fd := range fds {
		res.Columns = append(res.Columns, fd.Name)
	}
	maxValue := t.cfg.MaxBytes / 4
	cols, _ := json.Marshal(res.Columns)
	size := len(cols) + 256 // the columns and the other fields
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for rows.Next() {
		if res.RowCount >= maxRows {
			res.Truncated, res.TruncatedBy = true, "max_rows"
			break
		}
		raw := rows.RawValues()
		row := make([]any, len(raw))
		for i, b := range raw {
			var cut bool
			row[i], cut = jsonValue(fds[i].DataTypeOID, b, maxValue)
			res.ValuesCut = res.ValuesCut || cut
		}
		buf.Reset()
		if err := enc.Encode(row); err != nil {
			return nil, err
		}
		if size+buf.Len() > t.cfg.MaxBytes {
			res.Truncated, res.TruncatedBy = true, "max_bytes"
			break
		}
		size += buf.Len()
		res.Rows = append(res.Rows, row)
		res.RowCount++
	}
	if err := rows.Err(); !res.Truncated && err != nil && rowTooBig(err) {
		rows.Close()
		if readWrite {
			return nil, fmt.Errorf("a row is larger than %d bytes (max_row_bytes); the statement was rolled back", t.cfg.MaxRowBytes)
		}
		res.Truncated, res.TruncatedBy = true, "max_row_bytes"
		res.Note = fmt.Sprintf("the next row is larger than %d bytes and was not read; select less of it (e.g. left(col, 1000), length(col))", t.cfg.MaxRowBytes)
		res.Command = "SELECT"
		return res, nil
	}
	if res.Truncated && !readWrite {
		// A read is rolled back anyway: give the server a moment to
		// finish, then cancel the rest rather than read it all.
		stop := time.AfterFunc(250*time.Millisecond, qcancel)
		rows.Close()
		stop.Stop()
		if err := rows.Err(); err != nil && qctx.Err() == nil {
			return nil, err
		}
	} else {
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	tag := rows.CommandTag()
	res.Command = tag.String()
	res.RowsAffected = tag.RowsAffected()
	return res, nil
}

func (t *Tool) queryError(err error, stalled bool) error {
	if stalled {
		return fmt.Errorf("sql_query: %w after %s (the server did not end it within %s)", ErrTimeout, t.cfg.StatementTimeout, t.cfg.StatementTimeout+5*time.Second)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if pe.Code == "57014" && strings.Contains(pe.Message, "statement timeout") {
			return fmt.Errorf("sql_query: %w after %s", ErrTimeout, t.cfg.StatementTimeout)
		}
		msg := fmt.Sprintf("%s: %s (SQLSTATE %s)", pe.Severity, pe.Message, pe.Code)
		if pe.Detail != "" {
			msg += "; " + pe.Detail
		}
		if pe.Hint != "" {
			msg += "; hint: " + pe.Hint
		}
		return fmt.Errorf("sql_query: %s: %w", msg, err)
	}
	return fmt.Errorf("sql_query: %w", err)
}

// convertParams turns JSON parameters into the text Postgres parses into
// each parameter's type.
func convertParams(raw []json.RawMessage) ([]any, error) {
	out := make([]any, len(raw))
	for i, r := range raw {
		r = bytes.TrimSpace(r)
		switch {
		case len(r) == 0 || string(r) == "null":
			out[i] = nil
		case r[0] == '"':
			var s string
			if err := json.Unmarshal(r, &s); err != nil {
				return nil, fmt.Errorf("params[%d]: %w", i, err)
			}
			out[i] = s
		case r[0] == '{' || r[0] == '[':
			var buf bytes.Buffer
			if err := json.Compact(&buf, r); err != nil {
				return nil, fmt.Errorf("params[%d]: %w", i, err)
			}
			out[i] = buf.String()
		default: // number, true, false
			if !json.Valid(r) {
				return nil, fmt.Errorf("params[%d]: not JSON", i)
			}
			out[i] = string(r)
		}
	}
	return out, nil
}

// OIDs of the types rendered as JSON numbers, booleans or JSON.
const (
	oidBool    = 16
	oidInt8    = 20
	oidInt2    = 21
	oidInt4    = 23
	oidOID     = 26
	oidJSON    = 114
	oidFloat4  = 700
	oidFloat8  = 701
	oidNumeric = 1700
	oidJSONB   = 3802
)

// jsonValue renders a column value received in text format: NULL as null,
// booleans and finite numbers as JSON, json and jsonb as themselves,
// everything else as Postgres's text. Text longer than maxValue is cut.
func jsonValue(oid uint32, b []byte, maxValue int) (v any, cut bool) {
	if b == nil {
		return nil, false
	}
	s := string(b)
	switch oid {
	case oidBool:
		return s == "t", false
	case oidInt2, oidInt4, oidInt8, oidOID:
		return json.Number(s), false
	case oidFloat4, oidFloat8, oidNumeric:
		if _, err := strconv.ParseFloat(s, 64); err == nil && !strings.ContainsAny(s, "InfinityNaN") {
			return json.Number(s), false
		}
		return s, false
	case oidJSON, oidJSONB:
		if len(b) <= maxValue && json.Valid(b) {
			return json.RawMessage(b), false
		}
	}
	if len(s) > maxValue {
		n := maxValue
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		return strings.ToValidUTF8(s[:n], "\uFFFD") + fmt.Sprintf("…[cut: %d bytes in all]", len(s)), true
	}
	return strings.ToValidUTF8(s, "\uFFFD"), false
}

// rowTooBig: the server sent a message over Config.MaxRowBytes.
func rowTooBig(err error) bool {
	var e *pgproto3.ExceededMaxBodyLenErr
	return errors.As(err, &e)
}
