package sqltool

import (
	"encoding/json"
	"strings"

	"github.com/agentmesh/agentmesh/pkg/tools"
)

// Level is how a statement is treated.
type Level int

const (
	// Allow: a plain read (SELECT, WITH … SELECT, VALUES, TABLE, SHOW,
	// EXPLAIN without ANALYZE of a write); runs without asking.
	Allow Level = iota
	// Approve: needs a person's approval under PolicyApprove; refused
	// under PolicyRefuse.
	Approve
	// Refuse: refused whatever the policy (can never run through this
	// tool, or too destructive to offer for approval).
	Refuse
)

func (l Level) String() string {
	switch l {
	case Allow:
		return "allow"
	case Approve:
		return "approve"
	default:
		return "refuse"
	}
}

// Verdict is the classifier's judgement of one query.
type Verdict struct {
	Level Level
	// Writes is set when the statement may change data, schema or other
	// persistent state; such a statement cannot succeed on a read-only
	// tool and is refused there rather than offered for approval.
	Writes bool
	// Unknown is set when the statement calls a function whose effects
	// are not known (not a built-in known to only read): it needs
	// approval, and an approved call runs READ WRITE on a read-write
	// tool (READ ONLY otherwise).
	Unknown bool
	// Reason says why, for the model or the person approving.
	Reason string
}

func (v Verdict) worse(o Verdict) Verdict {
	w := v
	if o.Level > v.Level {
		w = o
	}
	w.Writes = v.Writes || o.Writes
	w.Unknown = v.Unknown || o.Unknown
	return w
}

func allow() Verdict { return Verdict{Level: Allow} }
func approve(writes bool, why string) Verdict {
	return Verdict{Level: Approve, Writes: writes, Reason: why}
}
func refuse(why string) Verdict { return Verdict{Level: Refuse, Writes: true, Reason: why} }

// Policy says what happens to statements that need approval.
type Policy string

const (
	// PolicyApprove (the default): they wait for a person's approval.
	PolicyApprove Policy = "approve"
	// PolicyRefuse: they are refused.
	PolicyRefuse Policy = "refuse"
)

// Assess is sql_query's tools.Spec.Assess with the default policy
// (PolicyApprove) and a database that takes writes once approved; the
// package registers it at init. An executor with a configured Tool
// registers (*Tool).Assess instead, which applies the tool's policy and
// its read-only setting.
func Assess(args json.RawMessage) tools.Assessment {
	return AssessWith(PolicyApprove, false)(args)
}

func init() { tools.Register("sql_query", nil, Assess) }

// AssessWith returns an Assess function for policy; readOnly refuses the
// statements that write (they would fail anyway) instead of asking a
// person to approve them.
func AssessWith(policy Policy, readOnly bool) func(json.RawMessage) tools.Assessment {
	return func(args json.RawMessage) tools.Assessment {
		var a Args
		if err := json.Unmarshal(args, &a); err != nil {
			return tools.Assessment{Deny: true, Reason: "arguments are not a sql_query call: " + err.Error()}
		}
		return assessment(Classify(a.Query), policy, readOnly)
	}
}

func assessment(v Verdict, policy Policy, readOnly bool) tools.Assessment {
	risk := tools.RiskRead
	if v.Writes || v.Unknown {
		risk = tools.RiskWrite
	}
	switch {
	case v.Level == Allow:
		return tools.Assessment{Risk: risk}
	case v.Level == Refuse:
		return tools.Assessment{Deny: true, Reason: v.Reason, Risk: risk}
	case readOnly && v.Writes:
		return tools.Assessment{Deny: true, Reason: v.Reason + "; this database is read-only for agents", Risk: risk}
	case policy == PolicyRefuse:
		return tools.Assessment{Deny: true, Reason: v.Reason + "; policy refuses statements that need approval", Risk: risk}
	default:
		return tools.Assessment{NeedsApproval: true, Reason: v.Reason, Risk: risk}
	}
}

// Classify judges a query. It reads the query with a tokenizer that knows
// PostgreSQL's quoting (strings, escape strings E'…', quoted identifiers, U&
// identifiers with UESCAPE, dollar quotes, nested comments), so no keyword
// hidden in a string or comment counts, no semicolon inside one splits the
// query, and every identifier is decoded to the name Postgres would look
// up (ident.go):
//
//   - Refuse: an empty query; more than one statement (the extended
//     protocol runs only one: send them as separate calls); an
//     unterminated string, identifier or comment; an identifier or
//     UESCAPE clause Postgres would reject; DROP DATABASE, TABLESPACE,
//     ROLE, USER, GROUP or OWNED, REASSIGN OWNED; CREATE or ALTER of ROLE,
//     USER or GROUP; ALTER SYSTEM; LOAD; COPY … PROGRAM and COPY to or
//     from a server file; functions that reach the server's files, other
//     sessions, the server's process or other servers (functions.go:
//     pg_read_*, pg_ls_*, lo_import, lo_export, pg_terminate_backend,
//     pg_cancel_backend, pg_reload_conf, dblink*, …).
//   - Approve: DML (INSERT, UPDATE, DELETE, MERGE, COPY), with a sharper
//     reason for UPDATE or DELETE without WHERE; DDL (CREATE, ALTER, DROP,
//     TRUNCATE, GRANT, REVOKE, COMMENT, …); maintenance (VACUUM, ANALYZE,
//     REINDEX, CLUSTER, REFRESH); SET and RESET (roles, session settings);
//     DO and CALL; transaction control; LOCK, LISTEN, NOTIFY, cursors,
//     PREPARE and EXECUTE; a SELECT with a data-modifying WITH, INTO, or
//     FOR UPDATE/SHARE; functions with known side effects (pg_sleep,
//     set_config, nextval, setval, advisory locks, lo_*, pg_notify,
//     query_to_xml and others that run SQL given as text); every function
//     that is not a built-in known to only read (the allowlist in
//     functions.go); and any statement it does not recognise.
//   - Allow: everything else that starts with SELECT, WITH, VALUES,
//     TABLE, SHOW or EXPLAIN (EXPLAIN ANALYZE is judged as the statement
//     it runs).
//
// A classifier cannot see what a user-defined operator, cast or type does;
// an allowed statement still runs in a READ ONLY transaction that is
// rolled back, as a role the tool checked at start (role.go).
func Classify(query string) Verdict {
	toks := lex(query)
	var stmts [][]token
	var cur []token
	for _, t := range toks {
		if t.unterminated {
			return refuse("unterminated quoted string, identifier or comment")
		}
		switch t.kind {
		case tokSpace, tokComment:
		case tokSemi:
			if len(cur) > 0 {
				stmts = append(stmts, cur)
			}
			cur = nil
		default:
			cur = append(cur, t)
		}
	}
	if len(cur) > 0 {
		stmts = append(stmts, cur)
	}
	switch len(stmts) {
	case 0:
		return refuse("empty query")
	case 1:
		ts, err := applyUescape(stmts[0])
		if err != nil {
			return refuse(err.Error())
		}
		return classifyStmt(ts)
	default:
		return refuse("more than one statement: send one statement per call")
	}
}

// classifyStmt judges one statement's significant tokens (no spaces,
// comments or semicolons). It is a decision table over the statement's
// leading words, a few lines over the house's ~80: kept whole so every
// rule is read beside the others.
func classifyStmt(ts []token) Verdict {
	for len(ts) > 0 && ts[0].kind == tokOpen {
		ts = ts[1:]
	}
	if len(ts) == 0 {
		return approve(true, "unrecognised statement")
	}
	kw := ts[0].upper()
	second := ""
	if len(ts) > 1 {
		second = ts[1].upper()
	}
	v := allow()
	switch kw {
	case "SELECT", "VALUES", "TABLE", "WITH":
		v = classifyRead(ts)
	case "SHOW":
	case "EXPLAIN":
		v = classifyExplain(ts[1:])
	case "INSERT", "MERGE":
		v = approve(true, kw+" changes data")
	case "UPDATE", "DELETE":
		if !hasTopLevelWord(ts, "WHERE") {
			v = approve(true, kw+" without WHERE changes every row of the table")
		} else {
			v = approve(true, kw+" changes data")
		}
	case "COPY":
		v = classifyCopy(ts)
	case "DROP":
		switch second {
		case "DATABASE", "TABLESPACE", "ROLE", "USER", "GROUP", "OWNED":
			v = refuse("DROP " + second + " is refused: too destructive to offer for approval")
		default:
			v = approve(true, "DDL: DROP "+second+" removes schema objects and their data")
		}
	case "REASSIGN":
		v = refuse("REASSIGN OWNED is refused: roles and ownership are for an administrator")
	case "CREATE", "ALTER":
		switch {
		case kw == "ALTER" && second == "SYSTEM":
			v = refuse("ALTER SYSTEM is refused: it changes the server's configuration")
		case second == "ROLE" || second == "USER" || second == "GROUP":
			v = refuse(kw + " " + second + " is refused: roles are for an administrator")
		default:
			v = approve(true, "DDL: "+kw+" "+second+" changes the schema")
		}
	case "TRUNCATE":
		v = approve(true, "TRUNCATE deletes every row of the table")
	case "GRANT", "REVOKE":
		v = approve(true, kw+" changes privileges")
	case "COMMENT", "SECURITY", "IMPORT", "REFRESH", "REINDEX", "CLUSTER", "VACUUM", "ANALYZE", "ANALYSE", "CHECKPOINT":
		v = approve(true, kw+" changes the database")
	case "LOAD":
		v = refuse("LOAD is refused: it loads a shared library into the server")
	case "SET", "RESET":
		if second == "ROLE" || second == "SESSION" {
			v = approve(false, kw+" changes the role the statements run as")
		} else {
			v = approve(false, kw+" changes session settings")
		}
	case "DO":
		v = approve(true, "DO runs procedural code")
	case "CALL":
		v = approve(true, "CALL runs a procedure")
	case "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE":
		v = approve(false, "transaction control: each call runs in its own transaction")
	case "PREPARE", "EXECUTE", "DEALLOCATE":
		v = approve(true, kw+": prepared statements are not checked")
	case "LOCK":
		v = approve(true, "LOCK takes table locks")
	case "LISTEN", "UNLISTEN", "NOTIFY":
		v = approve(false, kw+" uses notifications")
	case "DECLARE", "FETCH", "MOVE", "CLOSE":
		v = approve(false, kw+": cursors do not outlive a call")
	case "DISCARD":
		v = approve(false, "DISCARD resets session state")
	default:
		v = approve(true, "unrecognised statement "+strings.ToUpper(firstText(ts)))
	}
	return v.worse(classifyCalls(ts))
}

func firstText(ts []token) string {
	s := ts[0].text
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}

// classifyRead judges a SELECT, WITH, VALUES or TABLE statement: a
// data-modifying WITH, SELECT INTO and locking clauses need approval.
func classifyRead(ts []token) Verdict {
	v := allow()
	for i, t := range ts {
		prev := ""
		if i > 0 {
			prev = ts[i-1].upper()
		}
		switch kw := t.upper(); kw {
		case "INSERT", "DELETE", "MERGE":
			v = v.worse(approve(true, "a data-modifying "+kw+" inside the query changes data"))
		case "UPDATE":
			if prev == "FOR" || prev == "KEY" {
				v = v.worse(approve(true, "SELECT … FOR UPDATE locks rows"))
			} else {
				v = v.worse(approve(true, "a data-modifying UPDATE inside the query changes data"))
			}
		case "SHARE":
			if prev == "FOR" || prev == "KEY" {
				v = v.worse(approve(true, "SELECT … FOR SHARE locks rows"))
			}
		case "INTO":
			v = v.worse(approve(true, "SELECT … INTO creates a table"))
		}
	}
	return v
}

// classifyExplain judges EXPLAIN's target: without ANALYZE nothing runs.
func classifyExplain(ts []token) Verdict {
	analyze := false
	if len(ts) > 0 && ts[0].kind == tokOpen {
		i := 1
		for ; i < len(ts) && ts[i].kind != tokClose; i++ {
			if w := ts[i].upper(); w == "ANALYZE" || w == "ANALYSE" {
				analyze = true
				if i+1 < len(ts) {
					switch strings.ToUpper(ts[i+1].text) {
					case "FALSE", "OFF", "0", "'FALSE'", "'OFF'", "'0'":
						analyze = false
					}
				}
			}
		}
		ts = ts[min(i+1, len(ts)):]
	}
	for len(ts) > 0 {
		w := ts[0].upper()
		if w != "ANALYZE" && w != "ANALYSE" && w != "VERBOSE" {
			break
		}
		if w != "VERBOSE" {
			analyze = true
		}
		ts = ts[1:]
	}
	if !analyze || len(ts) == 0 {
		return allow()
	}
	v := classifyStmt(ts)
	if v.Level != Allow {
		v.Reason = "EXPLAIN ANALYZE runs the statement: " + v.Reason
	}
	return v
}

func classifyCopy(ts []token) Verdict {
	for i, t := range ts {
		w := t.upper()
		if w == "PROGRAM" {
			return refuse("COPY … PROGRAM is refused: it runs a shell command on the database server")
		}
		if (w == "FROM" || w == "TO") && i+1 < len(ts) && ts[i+1].kind == tokString {
			return refuse("COPY to or from a server file is refused")
		}
	}
	return approve(true, "COPY moves data in bulk (and cannot run through this tool's protocol)")
}

// hasTopLevelWord reports whether the keyword appears outside parentheses.
func hasTopLevelWord(ts []token, kw string) bool {
	depth := 0
	for _, t := range ts {
		switch t.kind {
		case tokOpen:
			depth++
		case tokClose:
			depth--
		}
		if depth == 0 && t.upper() == kw {
			return true
		}
	}
	return false
}
