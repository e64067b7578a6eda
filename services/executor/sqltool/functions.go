package sqltool

import "strings"

// Functions are judged by an allowlist. A call (a name followed by "(",
// spaces and comments between them ignored, the name decoded as Postgres
// decodes it — see ident.go) is:
//
//   - refused when its name (schema-qualified or not: the last part
//     counts) is in refusedFuncs or starts with a refusedPrefixes entry —
//     it reaches the server's files, process or configuration, other
//     sessions or other servers;
//   - sent for approval when it is in approveFuncs/approvePrefixes — known
//     side effects (sleeping, settings, sequences, locks, large objects,
//     notifications) or SQL given as text that no classifier sees;
//   - allowed when it is in readFuncs — built-ins known only to compute
//     and read — and unqualified or qualified by pg_catalog (a function of
//     the same name in another schema is someone's own code);
//   - otherwise sent for approval, as a function whose effects are not
//     known: user-defined functions, extensions, new built-ins. An
//     approved call runs READ ONLY unless the tool is read-write.
//
// An allowlist fails safe: a function it forgets costs an approval, not
// an escape. What it cannot see — a user-defined operator, cast, type
// input function or a function called through attribute notation
// (row.func) — still runs in a READ ONLY transaction as the role the
// tool checked at start (see checkRole).

// refusedFuncs reach beyond the database: the server's files, its
// process and configuration, other sessions, other servers.
var refusedFuncs = map[string]string{
	"pg_terminate_backend":              "ends another session",
	"pg_cancel_backend":                 "cancels another session's query",
	"pg_signal_backend":                 "signals another session",
	"pg_reload_conf":                    "reloads the server's configuration",
	"pg_rotate_logfile":                 "rotates the server's log",
	"pg_rotate_logfile_old":             "rotates the server's log",
	"pg_promote":                        "promotes a standby",
	"pg_stat_file":                      "reads the server's files",
	"pg_logdir_ls":                      "lists the server's files",
	"lo_import":                         "reads the server's files",
	"lo_export":                         "writes the server's files",
	"pg_switch_wal":                     "switches the WAL file",
	"pg_create_restore_point":           "creates a restore point",
	"pg_drop_replication_slot":          "drops a replication slot",
	"pg_log_backend_memory_contexts":    "writes to the server's log",
	"pg_backup_start":                   "starts a backup",
	"pg_backup_stop":                    "stops a backup",
	"pg_start_backup":                   "starts a backup",
	"pg_stop_backup":                    "stops a backup",
	"pg_wal_replay_pause":               "pauses WAL replay",
	"pg_wal_replay_resume":              "resumes WAL replay",
	"pg_replication_origin_drop":        "drops a replication origin",
	"pg_copy_physical_replication_slot": "copies a replication slot",
	"pg_copy_logical_replication_slot":  "copies a replication slot",
}

var refusedPrefixes = []struct{ prefix, why string }{
	{"dblink", "connects to other servers"},
	{"pg_ls_", "lists the server's files"},
	{"pg_read_", "reads the server's files"},
	{"pg_file_", "writes the server's files"},
	{"postgres_fdw", "manages connections to other servers"},
}

// approveFuncs have known side effects (or run SQL given as text, which
// the classifier cannot see); writes says whether they change data.
var approveFuncs = map[string]struct {
	writes bool
	why    string
}{
	"pg_sleep":                    {false, "sleeps"},
	"pg_sleep_for":                {false, "sleeps"},
	"pg_sleep_until":              {false, "sleeps"},
	"set_config":                  {false, "changes session settings"},
	"setseed":                     {false, "changes session state"},
	"nextval":                     {true, "advances a sequence"},
	"setval":                      {true, "sets a sequence"},
	"pg_notify":                   {false, "sends a notification"},
	"pg_logical_emit_message":     {true, "writes to the WAL"},
	"query_to_xml":                {false, "runs SQL given as text"},
	"query_to_xmlschema":          {false, "runs SQL given as text"},
	"query_to_xml_and_xmlschema":  {false, "runs SQL given as text"},
	"cursor_to_xml":               {false, "reads a cursor"},
	"ts_stat":                     {false, "runs SQL given as text"},
	"ts_rewrite":                  {false, "may run SQL given as text"},
	"pg_import_system_collations": {true, "creates collations"},
	"txid_current":                {true, "assigns a transaction id"},
	"pg_current_xact_id":          {true, "assigns a transaction id"},
}

var approvePrefixes = []struct {
	prefix string
	writes bool
	why    string
}{
	{"lo_", true, "changes large objects"},
	{"pg_advisory", false, "takes advisory locks"},
	{"pg_try_advisory", false, "takes advisory locks"},
	{"pg_stat_reset", true, "resets statistics"},
	{"pg_create_", true, "creates server objects"},
	{"pg_drop_", true, "drops server objects"},
	{"pg_replication_", true, "changes replication state"},
	{"pg_logical_slot_", true, "consumes replication changes"},
}

// readFuncs are built-in functions (and type names used with a modifier,
// varchar(10)) known to compute or read only, with no effect outside the
// statement.
var readFuncs = setOf(`
abs cbrt ceil ceiling degrees div exp factorial floor gcd lcm ln log log10 min_scale mod pi power
radians round scale sign sqrt trim_scale trunc width_bucket random random_normal acos acosd asin
asind atan atand atan2 atan2d cos cosd cot cotd sin sind tan tand sinh cosh tanh asinh acosh atanh
erf erfc gamma lgamma
ascii bit_length btrim char_length character_length chr concat concat_ws format initcap left length
lower lpad ltrim md5 normalize octet_length overlay parse_ident position quote_ident quote_literal
quote_nullable regexp_count regexp_instr regexp_like regexp_match regexp_matches regexp_replace
regexp_split_to_array regexp_split_to_table regexp_substr repeat replace reverse right rpad rtrim
split_part starts_with string_to_array string_to_table strpos substr substring to_ascii to_hex
to_bin to_oct translate trim unistr upper casefold convert convert_from convert_to decode encode
get_bit get_byte set_bit set_byte sha224 sha256 sha384 sha512 crc32 crc32c unicode_version
unicode_assigned bit_count string_agg
to_char to_date to_number to_timestamp
age clock_timestamp date_add date_bin date_part date_subtract date_trunc extract isfinite
justify_days justify_hours justify_interval make_date make_interval make_time make_timestamp
make_timestamptz now statement_timestamp timeofday transaction_timestamp timezone
numeric decimal varchar char character varying bpchar text int int2 int4 int8 integer smallint
bigint float float4 float8 real bool boolean date time timetz timestamp timestamptz interval bit
varbit bytea json jsonb uuid inet cidr macaddr macaddr8 money name oid regclass regtype regproc
regprocedure regnamespace regrole xml tsvector tsquery point line lseg box path polygon circle
avg count max min sum array_agg bool_and bool_or every json_agg json_agg_strict jsonb_agg
jsonb_agg_strict json_object_agg jsonb_object_agg json_object_agg_strict jsonb_object_agg_strict
json_object_agg_unique jsonb_object_agg_unique json_object_agg_unique_strict
jsonb_object_agg_unique_strict range_agg range_intersect_agg xmlagg any_value corr covar_pop
covar_samp regr_avgx regr_avgy regr_count regr_intercept regr_r2 regr_slope regr_sxx regr_sxy
regr_syy stddev stddev_pop stddev_samp variance var_pop var_samp mode percentile_cont
percentile_disc rank dense_rank percent_rank cume_dist grouping bit_and bit_or bit_xor
row_number ntile lag lead first_value last_value nth_value
coalesce nullif greatest least num_nulls num_nonnulls
array_append array_cat array_dims array_fill array_length array_lower array_ndims array_position
array_positions array_prepend array_remove array_replace array_reverse array_sample array_shuffle
array_sort array_to_string array_upper cardinality trim_array unnest array_to_json generate_series
generate_subscripts
to_json to_jsonb json_build_array jsonb_build_array json_build_object jsonb_build_object json_object
jsonb_object json_array_elements jsonb_array_elements json_array_elements_text
jsonb_array_elements_text json_array_length jsonb_array_length json_each jsonb_each json_each_text
jsonb_each_text json_extract_path jsonb_extract_path json_extract_path_text jsonb_extract_path_text
json_object_keys jsonb_object_keys json_populate_record jsonb_populate_record
jsonb_populate_record_valid json_populate_recordset jsonb_populate_recordset json_to_record
jsonb_to_record json_to_recordset jsonb_to_recordset json_strip_nulls jsonb_strip_nulls jsonb_set
jsonb_set_lax jsonb_insert jsonb_path_exists jsonb_path_match jsonb_path_query
jsonb_path_query_array jsonb_path_query_first jsonb_path_exists_tz jsonb_path_match_tz
jsonb_path_query_tz jsonb_path_query_array_tz jsonb_path_query_first_tz jsonb_pretty json_typeof
jsonb_typeof row_to_json json_array json_scalar json_serialize json_exists json_query json_value
json_table json_arrayagg json_objectagg
xmlelement xmlforest xmlconcat xmlparse xmlpi xmlroot xmlserialize xmlexists xmlattributes
xmlnamespaces xmltable xmlcomment xmltext xpath xpath_exists xml_is_well_formed
xml_is_well_formed_document xml_is_well_formed_content
to_tsvector to_tsquery plainto_tsquery phraseto_tsquery websearch_to_tsquery ts_rank ts_rank_cd
ts_headline setweight strip numnode querytree tsvector_to_array array_to_tsvector ts_delete
ts_filter get_current_ts_config
host hostmask masklen netmask network broadcast family abbrev set_masklen inet_merge
inet_same_family
gen_random_uuid uuidv4 uuidv7 uuid_extract_timestamp uuid_extract_version
isempty lower_inc upper_inc lower_inf upper_inf range_merge multirange int4range int8range numrange
tsrange tstzrange daterange int4multirange int8multirange nummultirange tsmultirange
tstzmultirange datemultirange
area center diameter height width isclosed isopen npoints pclose popen radius bound_box
current_database current_schema current_schemas current_setting version pg_backend_pid
inet_client_addr inet_client_port inet_server_addr inet_server_port pg_postmaster_start_time
pg_conf_load_time has_table_privilege has_schema_privilege has_column_privilege
has_database_privilege has_function_privilege has_any_column_privilege has_sequence_privilege
has_type_privilege has_language_privilege has_parameter_privilege pg_has_role pg_typeof
format_type pg_get_viewdef pg_get_functiondef pg_get_indexdef pg_get_constraintdef pg_get_expr
pg_get_userbyid pg_get_keywords pg_get_serial_sequence pg_get_function_arguments
pg_get_function_result pg_get_function_identity_arguments pg_get_triggerdef pg_get_ruledef
pg_get_statisticsobjdef pg_get_partkeydef pg_table_is_visible pg_type_is_visible
pg_function_is_visible to_regclass to_regtype to_regtypemod to_regproc to_regprocedure to_regrole
to_regnamespace to_regcollation obj_description col_description shobj_description pg_column_size
pg_database_size pg_relation_size pg_table_size pg_indexes_size pg_total_relation_size
pg_size_pretty pg_size_bytes pg_encoding_to_char pg_client_encoding pg_is_in_recovery
pg_input_is_valid pg_input_error_info pg_column_compression pg_collation_for pg_char_to_encoding
pg_jit_available pg_options_to_table pg_describe_object pg_identify_object
pg_identify_object_as_address pg_get_object_address pg_relation_is_updatable
pg_column_is_updatable pg_tablespace_location
bernoulli system system_rows system_time
row_security_active cast treat
`)

func setOf(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}

// notCalls are keywords after which "(" never starts a call: Postgres's
// reserved keywords and the column-name keywords that cannot name a
// function (EXISTS (…), VALUES (…), ROW (…)), plus the type-and-function
// keywords used as operators (LIKE (…), JOIN (…)). A skipped word is
// only the word: the tokens inside its parentheses are still judged.
var notCalls = setOf(`
ALL ANALYSE ANALYZE AND ANY ARRAY AS ASC ASYMMETRIC BOTH CASE CHECK COLLATE COLUMN CONSTRAINT
CREATE DEFAULT DEFERRABLE DESC DISTINCT DO ELSE END EXCEPT FETCH FOR FOREIGN FROM GRANT GROUP
HAVING IN INITIALLY INTERSECT INTO LATERAL LEADING LIMIT NOT NULL OFFSET ON ONLY OR ORDER PLACING
PRIMARY REFERENCES RETURNING SELECT SOME SYMMETRIC TABLE THEN TO TRAILING UNION UNIQUE USING
VARIADIC WHEN WHERE WINDOW WITH
BETWEEN EXISTS ROW VALUES
CROSS FULL ILIKE INNER IS ISNULL JOIN LIKE NATURAL NOTNULL OUTER OVERLAPS SIMILAR TABLESAMPLE
`)

// contextual are unreserved keywords that are syntax, not a call, only
// where the grammar puts them; elsewhere "word(" is a call of a function
// of that name (Postgres lets unreserved keywords name functions).
var contextual = map[string]func(ts []token, i int) bool{
	"FILTER":       afterClose, // count(*) FILTER (WHERE …)
	"OVER":         afterClose, // f() OVER (…)
	"REPEATABLE":   afterClose, // TABLESAMPLE m(…) REPEATABLE (…)
	"COLUMNS":      func(ts []token, i int) bool { return afterClose(ts, i) || i > 0 && ts[i-1].kind == tokString },
	"CONFLICT":     func(ts []token, i int) bool { return i > 0 && ts[i-1].upper() == "ON" },
	"MATERIALIZED": func(ts []token, i int) bool { return i > 0 && (ts[i-1].upper() == "AS" || ts[i-1].upper() == "NOT") },
	"SETS":         func(ts []token, i int) bool { return i > 0 && ts[i-1].upper() == "GROUPING" },
	"CUBE":         afterByOrComma,
	"ROLLUP":       afterByOrComma,
	"SET": func(ts []token, i int) bool {
		return ts[0].upper() == "UPDATE" || ts[0].upper() == "MERGE" || ts[0].upper() == "INSERT"
	},
	"INSERT":   func(ts []token, i int) bool { return i > 0 && ts[i-1].upper() == "THEN" },
	"EXPLAIN":  func(ts []token, i int) bool { return i == 0 },
	"OPERATOR": func(ts []token, i int) bool { return true }, // OPERATOR(schema.op)
}

func afterClose(ts []token, i int) bool { return i > 0 && ts[i-1].kind == tokClose }

func afterByOrComma(ts []token, i int) bool {
	return i > 0 && (ts[i-1].upper() == "BY" || ts[i-1].kind == tokOther && ts[i-1].text == ",")
}

// classifyCalls judges every function call in a statement (significant
// tokens, UESCAPE applied).
func classifyCalls(ts []token) Verdict {
	v := allow()
	for i := 0; i+1 < len(ts); i++ {
		if ts[i+1].kind != tokOpen {
			continue
		}
		t := ts[i]
		if t.kind != tokWord && t.kind != tokQIdent {
			continue
		}
		name, err := t.ident()
		if err != nil {
			return refuse("identifier " + clip(t.text) + " does not decode: " + err.Error())
		}
		qualified := i >= 1 && ts[i-1].kind == tokOther && ts[i-1].text == "."
		schema := ""
		if qualified {
			if i >= 2 && (ts[i-2].kind == tokWord || ts[i-2].kind == tokQIdent) {
				if schema, err = ts[i-2].ident(); err != nil {
					return refuse("identifier " + clip(ts[i-2].text) + " does not decode: " + err.Error())
				}
			} else {
				schema = "?"
			}
		}
		if t.kind == tokWord && !qualified {
			if notCalls[t.upper()] {
				continue
			}
			if ok := contextual[t.upper()]; ok != nil && ok(ts, i) {
				continue
			}
		}
		if why, ok := refusedFuncs[name]; ok {
			v = v.worse(refuse(name + "() is refused: it " + why))
			continue
		}
		if f, ok := approveFuncs[name]; ok {
			v = v.worse(approve(f.writes, name+"() "+f.why))
			continue
		}
		judged := false
		for _, p := range refusedPrefixes {
			if strings.HasPrefix(name, p.prefix) {
				v, judged = v.worse(refuse(name+"() is refused: it "+p.why)), true
			}
		}
		for _, p := range approvePrefixes {
			if strings.HasPrefix(name, p.prefix) {
				v, judged = v.worse(approve(p.writes, name+"() "+p.why)), true
			}
		}
		if judged {
			continue
		}
		if readFuncs[name] && (schema == "" || schema == "pg_catalog") {
			continue
		}
		if !qualified && columnList(ts, i) {
			continue
		}
		what := name
		if schema != "" {
			what = schema + "." + name
		}
		v = v.worse(Verdict{Level: Approve, Unknown: true,
			Reason: what + "() is not a built-in known to only read: its effects are unknown"})
	}
	return v
}

// columnList reports whether the name at ts[i], followed by "(", is a
// list of column names rather than a call: an alias after AS
// (… AS t(a, b)), an alias right after a parenthesised FROM item
// (generate_series(1, 3) g(i)), or a WITH query's name
// (WITH x(a) AS (…)).
func columnList(ts []token, i int) bool {
	if i == 0 {
		return false
	}
	prev := ts[i-1]
	switch {
	case prev.kind == tokWord && prev.upper() == "AS":
		return true
	case prev.kind == tokClose:
		// A call never follows ")" directly, except after OPERATOR(…).
		open := matchingOpen(ts, i-1)
		return open > 0 && ts[open-1].upper() != "OPERATOR"
	case prev.kind == tokWord && (prev.upper() == "WITH" || prev.upper() == "RECURSIVE"),
		prev.kind == tokOther && prev.text == ",":
		// WITH x(a, b) AS ( / AS MATERIALIZED ( / AS NOT MATERIALIZED (
		end := matchingClose(ts, i+1)
		if end < 0 || end+2 >= len(ts) || ts[end+1].upper() != "AS" {
			return false
		}
		rest := ts[end+2:]
		switch {
		case rest[0].kind == tokOpen:
			return true
		case rest[0].upper() == "MATERIALIZED":
			return len(rest) > 1 && rest[1].kind == tokOpen
		case rest[0].upper() == "NOT":
			return len(rest) > 2 && rest[1].upper() == "MATERIALIZED" && rest[2].kind == tokOpen
		}
	}
	return false
}

func matchingOpen(ts []token, close int) int {
	depth := 0
	for j := close; j >= 0; j-- {
		switch ts[j].kind {
		case tokClose:
			depth++
		case tokOpen:
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

func matchingClose(ts []token, open int) int {
	depth := 0
	for j := open; j < len(ts); j++ {
		switch ts[j].kind {
		case tokOpen:
			depth++
		case tokClose:
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
