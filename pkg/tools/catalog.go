package tools

import "encoding/json"

// The specs of the built-in tools that act. Their implementations are
// registered (Register) by the packages that run them: the child's sandboxed
// local tools (code_run, shell, fs_*) and the executor's privileged tools
// (web_fetch, sql_query).
func init() {
	builtin = append(builtin,
		Tool{Spec: Spec{
			Name:        "code_run",
			Description: "Runs a Python 3 or Node.js program in the task's sandbox (no network, 128 MB of memory, CPU and wall-time limits) and returns its exit status, stdout and stderr (each capped).",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"language":{"type":"string","enum":["python","node"],"description":"python (Python 3) or node (Node.js)."},` +
				`"code":{"type":"string","description":"The program's source.","maxLength":1048576},` +
				`"stdin":{"type":"string","description":"Standard input for the program.","maxLength":1048576},` +
				`"timeout_seconds":{"type":"integer","minimum":1,"maximum":300,"description":"Wall-time limit (default 30)."}},` +
				`"required":["language","code"],"additionalProperties":false}`),
			Category: CategoryCode, Risk: RiskExecute, Runs: InChild,
		}},
		Tool{Spec: Spec{
			Name:        "shell",
			Description: "Runs a shell command (sh -c) in the task's workspace inside the sandbox (no network, memory, CPU and wall-time limits) and returns its exit status, stdout and stderr (each capped).",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"command":{"type":"string","description":"The command line, run with sh -c.","maxLength":65536},` +
				`"stdin":{"type":"string","maxLength":1048576},` +
				`"timeout_seconds":{"type":"integer","minimum":1,"maximum":300,"description":"Wall-time limit (default 30)."}},` +
				`"required":["command"],"additionalProperties":false}`),
			Category: CategoryCode, Risk: RiskExecute, Runs: InChild,
		}},
		Tool{Spec: Spec{
			Name:        "fs_read",
			Description: "Reads a file of the task's workspace (a path relative to it).",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"path":{"type":"string","minLength":1,"maxLength":4096},` +
				`"offset":{"type":"integer","minimum":0},` +
				`"max_bytes":{"type":"integer","minimum":1,"maximum":1048576}},` +
				`"required":["path"],"additionalProperties":false}`),
			Category: CategoryFilesystem, Risk: RiskRead, Runs: InChild,
		}},
		Tool{Spec: Spec{
			Name:        "fs_write",
			Description: "Writes (or appends to) a file of the task's workspace (a path relative to it), creating parent directories.",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"path":{"type":"string","minLength":1,"maxLength":4096},` +
				`"content":{"type":"string","maxLength":10485760},` +
				`"append":{"type":"boolean"}},` +
				`"required":["path","content"],"additionalProperties":false}`),
			Category: CategoryFilesystem, Risk: RiskWrite, Runs: InChild,
		}},
		Tool{Spec: Spec{
			Name:        "fs_list",
			Description: "Lists a directory of the task's workspace (a path relative to it; empty for its root).",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"path":{"type":"string","maxLength":4096},` +
				`"recursive":{"type":"boolean"}},` +
				`"additionalProperties":false}`),
			Category: CategoryFilesystem, Risk: RiskRead, Runs: InChild,
		}},
		Tool{Spec: Spec{
			Name:        "web_fetch",
			Description: "Fetches an http or https URL and returns the status, content type and body (capped; truncation is flagged). Private, loopback and link-local addresses are refused.",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"url":{"type":"string","minLength":1,"maxLength":8192},` +
				`"method":{"type":"string","enum":["GET","POST","HEAD"]},` +
				`"headers":{"type":"object","additionalProperties":{"type":"string"}},` +
				`"body":{"type":"string","maxLength":1048576},` +
				`"max_bytes":{"type":"integer","minimum":1,"maximum":10485760}},` +
				`"required":["url"],"additionalProperties":false}`),
			Category: CategoryNetwork, Risk: RiskNetwork, Runs: InExecutor,
		}},
		Tool{Spec: Spec{
			Name:        "sql_query",
			Description: "Runs one parameterised SQL statement on the configured Postgres database (read-only by default) and returns the rows as JSON (capped). Statements that change data or schema need a person's approval or are refused.",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"query":{"type":"string","minLength":1,"maxLength":65536},` +
				`"params":{"type":"array","maxItems":100},` +
				`"max_rows":{"type":"integer","minimum":1,"maximum":10000}},` +
				`"required":["query"],"additionalProperties":false}`),
			Category: CategoryDatabase, Risk: RiskRead, Runs: InExecutor,
		}},
	)
}
