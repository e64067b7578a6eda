package app

// Env is one environment variable the agentmesh binary reads. Every flag
// has an environment variable; the README's configuration table and the
// deploy files are checked against this list by tests.
type Env struct {
	Name    string
	Default string
	// Commands that read it ("*" for all).
	Commands []string
	Help     string
}

// EnvVars lists every environment variable agentmesh reads.
// EnvVars is long on purpose: it is the one table of every variable.
func EnvVars() []Env {
	return []Env{
		{"AGENTMESH_NATS_URL", "nats://127.0.0.1:4222", []string{"state", "registry", "scheduler", "executor", "router"}, "NATS server URL(s) of the bus, comma-separated"},
		{"AGENTMESH_NATS_CREDS", "", []string{"state", "registry", "scheduler", "executor", "router"}, "NATS credentials file of this service's own bus identity (required: the bus refuses anonymous clients; agentmesh bus init writes them)"},
		{"AGENTMESH_NATS_CA", "", []string{"state", "registry", "scheduler", "executor", "router"}, "CA certificate (PEM) to verify the NATS server's TLS certificate; set it to require TLS to the bus"},
		{"AGENTMESH_NATS_TAP_SIGNER", "", []string{"state"}, "file with the account's scoped tap signing key (tap-signer.nk from agentmesh bus init); empty = amctl taps create is refused"},
		{"AGENTMESH_PREFIX", "am", []string{"*"}, "subject prefix of every bus subject and stream"},
		{"AGENTMESH_STREAM_REPLICAS", "", []string{"*"}, "JetStream replicas of the bus streams and KV buckets (1-5); empty = 3 where more than one NATS server is known (a URL list, or the servers of a cluster), else 1; an existing stream keeps its replicas and is named in a warning at start when it has fewer"},
		{"AGENTMESH_POSTGRES_URL", "", []string{"dev", "state"}, "Postgres URL of the system of record; empty = the embedded JetStream store"},
		{"AGENTMESH_LISTEN", "127.0.0.1:7400", []string{"dev", "router"}, "gRPC API listen address"},
		{"AGENTMESH_API_KEYS", "", []string{"dev", "router"}, "API keys as key=org or key=org:role, comma-separated (no role: admin; *:platform: a platform key); with no keys and no keys file, no authentication (org \"default\")"},
		{"AGENTMESH_MODEL_BASE_URL", "", []string{"dev", "registry", "executor"}, "base URL of the default model endpoint (OpenAI-compatible, or Anthropic's with AGENTMESH_MODEL_PROVIDER=anthropic); empty in dev = start the scripted model"},
		{"AGENTMESH_MODEL_PROVIDER", "openai", []string{"dev", "registry", "executor"}, "wire format of AGENTMESH_MODEL_BASE_URL: openai (any OpenAI-compatible server: OpenAI, Azure, Ollama, vLLM, llama.cpp, LM Studio, Groq, Together, OpenRouter …) or anthropic (Anthropic's native Messages API)"},
		{"AGENTMESH_MODELS", "", []string{"dev", "registry", "executor"}, "the operator's model table, YAML or JSON, inline (starting with '{') or a file path: models by the name agents use, each with provider, base_url, api_key_env (the variable holding its key) or no_key, model, price, limits (requests_per_minute, tokens_per_minute, burst; shared by every executor), limit_key, max_tokens, tool_calls_in_text, fallbacks; and orgs' limits (\"*\": every org). A bad entry refuses the start naming its field (README \"Real models\")"},
		{"AGENTMESH_MODEL_WAIT_IN_PLACE", "5s", []string{"dev", "executor"}, "longest a model call waits where it is for a rate limit's budget or a 429's Retry-After; a longer wait sends the task back to the queue until its reserved slot, holding no process (0 = the default, at most 10m)"},
		{"AGENTMESH_MODEL_API_KEY", "", []string{"dev", "registry", "executor"}, "API key of the model provider (OPENAI_API_KEY is read too)"},
		{"AGENTMESH_MODEL", "", []string{"dev", "registry", "executor"}, "default model name for agents that name none"},
		{"AGENTMESH_MODEL_ALLOW", "", []string{"dev", "executor"}, "model endpoints an agent's model.base_url may reach although loopback, private or link-local (e.g. a local Ollama: 127.0.0.1:11434): host, host:port, IP or CIDR, comma-separated; AGENTMESH_MODEL_BASE_URL's own host:port is always allowed"},
		{"AGENTMESH_MODEL_MAX_BYTES", "16MiB", []string{"dev", "executor"}, "cap of one model response as it is read, streamed or not (SSE framing included), e.g. 16MiB"},
		{"AGENTMESH_NODE", "", []string{"dev", "executor"}, "executor node name (default: host name)"},
		{"AGENTMESH_CAPACITY", "32", []string{"dev", "executor"}, "tasks an executor runs at once"},
		{"AGENTMESH_WALL_TIME", "10m", []string{"dev", "executor"}, "wall-time limit of one task attempt"},
		{"AGENTMESH_MAX_STEPS", "16", []string{"dev", "executor"}, "default maximum agent steps per task"},
		{"AGENTMESH_PRICES", "", []string{"dev", "executor"}, "model price table in USD per 1M prompt/completion tokens, optionally then cached prompt tokens read/written, e.g. gpt-4o-mini=0.15/0.60,claude-sonnet-4-5=3/15/0.30/3.75,llama3.1=0/0; unpriced models cost 0 (AGENTMESH_MODELS prices its own)"},
		{"AGENTMESH_DATA_DIR", ".agentmesh", []string{"dev"}, "where dev keeps the embedded NATS (JetStream) data"},
		{"AGENTMESH_NATS_LISTEN", "127.0.0.1:4222", []string{"dev"}, "loopback client port of dev's embedded NATS, for outside NATS clients; \"off\" to disable"},
		{"AGENTMESH_SCRIPT", "", []string{"dev", "scripted-model"}, "script file of the scripted model (default: the built-in demo script)"},
		{"AGENTMESH_SCRIPTED_LISTEN", "127.0.0.1:7401", []string{"scripted-model"}, "listen address of the scripted model server"},
		{"AGENTMESH_LOG_LEVEL", "info", []string{"*"}, "debug, info, warn or error"},
		{"AGENTMESH_LOG_FORMAT", "text", []string{"*"}, "text or json"},
		{"AGENTMESH_DEBUG_LISTEN", "", []string{"*"}, "serve Go's pprof profiles on this address (e.g. 127.0.0.1:6060); empty = off"},
		{"AGENTMESH_ACK_WAIT", "30s", []string{"dev", "executor"}, "how long a task's work stays with an executor that shows no sign of life before it is redelivered to another (node-loss detection)"},
		{"AGENTMESH_WEB_FETCH_ALLOW", "", []string{"dev", "executor"}, "hosts web_fetch and HTTP MCP servers may reach although private or loopback: host, host:port, IP or CIDR, comma-separated"},
		{"AGENTMESH_WEBHOOK_ALLOW", "", []string{"dev", "router", "scheduler"}, "webhook endpoints that may be reached although loopback, private or link-local (e.g. a receiver on this host: 127.0.0.1:9000): host, host:port, IP or CIDR, comma-separated; the router refuses other such URLs at create and the scheduler at every connection"},
		{"AGENTMESH_WEB_FETCH_MAX_BYTES", "51200", []string{"dev", "executor"}, "web_fetch's response cap in bytes (at most 258048)"},
		{"AGENTMESH_SQL_URL", "", []string{"dev", "executor"}, "Postgres URL sql_query runs on (give it a read-only role); empty = sql_query unavailable"},
		{"AGENTMESH_SQL_POLICY", "approve", []string{"dev", "executor"}, "what sql_query does with statements that change data or schema: approve (ask a person) or refuse"},
		{"AGENTMESH_SQL_READ_WRITE", "false", []string{"dev", "executor"}, "let approved sql_query writes commit (otherwise every statement runs read-only)"},
		{"AGENTMESH_SQL_ALLOW_PRIVILEGED_ROLE", "false", []string{"dev", "executor"}, "let sql_query use a superuser, a member of pg_read_server_files/pg_write_server_files/pg_execute_server_program, a role that can create roles, or (when AGENTMESH_SQL_READ_WRITE is false) a role that can write; refused at start otherwise"},
		{"AGENTMESH_SQL_MAX_ROW_BYTES", "1MiB", []string{"dev", "executor"}, "largest row sql_query reads from the server (a bigger row ends the result with a note instead of being read), e.g. 1MiB"},
		{"AGENTMESH_ISOLATION", "", []string{"dev", "executor"}, "isolation of agent processes: strict (every wall: namespaces, fresh root, Landlock, seccomp, cgroup limits, a uid per task; refuses to start without one), best-effort (every wall the host and user allow, the missing ones named in the log and the level on every task) or none (UNSANDBOXED, for development only); empty = strict for executor, best-effort for dev"},
		{"AGENTMESH_MATCH_WEIGHTS", "capability=0.4,workload=0.3,priority=0.2,affinity=0.1", []string{"dev", "registry"}, "weights of scored agent matching (a weight not named is 0; each ≥ 0, their sum > 0); a bad or negative one refuses to start"},
		{"AGENTMESH_MATCH_AFFINITY_WINDOW", "1h", []string{"dev", "registry"}, "how far back an org's finished tasks count for an agent's affinity in matching (at most 168h)"},
		{"AGENTMESH_ANALYSIS", "auto", []string{"dev", "registry"}, "task analysis of tasks naming neither agent nor skills: auto (AGENTMESH_ANALYSIS_MODEL when one is configured, else the fallback: similarity of the input to the skills' descriptions; the analysis says why no model was asked), fallback (never call a model) or off (such tasks go to the default agent)"},
		{"AGENTMESH_ANALYSIS_MODEL", "", []string{"dev", "registry"}, "model of the task analysis, a cheaper one than the agents' will do: a name of AGENTMESH_MODELS (OpenAI-compatible) or a model at AGENTMESH_MODEL_BASE_URL; empty = AGENTMESH_MODEL; neither = no model is asked"},
		{"AGENTMESH_ANALYSIS_TIMEOUT", "2s", []string{"dev", "registry"}, "bound of task analysis's model call (then the fallback chooses), at most 1m"},
		{"AGENTMESH_PROPOSALS", "on", []string{"dev", "registry"}, "on: a task no agent fits is accepted blocked on an agent the registry drafts from the skill catalogue, for a person to approve (amctl proposals); off: it is refused (FailedPrecondition)"},
		{"AGENTMESH_PROPOSAL_THRESHOLD", "0.5", []string{"dev", "registry"}, "an agent is proposed when no candidate's capability (its coverage of the required skills, 0-1) is above this, from 0 to below 1"},
		{"AGENTMESH_WARM_POOL", "", []string{"dev", "executor"}, "how many idle agent processes the executor keeps started and sandboxed ahead of time, each handed exactly one task and then destroyed unless AGENTMESH_CHILD_REUSE says otherwise (dispatch does not wait for a spawn); empty = the capacity, at most 64; 0 = off. Idle ones and running tasks together never exceed the capacity"},
		{"AGENTMESH_RELEASE_AFTER", "2s", []string{"dev", "executor"}, "a model call that has not answered after this long releases the agent process waiting for it (its sandbox removed); a fresh one replays the checkpointed steps and goes on with the answer when it comes — the model is not asked again. A process that holds something of its own (stdio MCP servers, files a tool wrote) is kept. 0 = never release; at least 10ms"},
		{"AGENTMESH_RELEASE_ABOVE", "64", []string{"dev", "executor"}, "how many agent processes may wait for a model answer before any is released (AGENTMESH_RELEASE_AFTER): a process whose call outlives that delay is released only while more than this many wait, since its replacement costs a fresh sandboxed spawn (~12 ms of CPU) for the ~2.5 MiB it held; 0 = release every one"},
		{"AGENTMESH_KEEP_ANSWERS_AFTER", "100ms", []string{"dev", "executor"}, "a model answer that took at least this long is checkpointed by the executor as soon as it has it (handed to the agent process waiting for it, or while one starts for it), so an executor lost meanwhile loses no such paid answer; quicker ones are written with the step that follows them (one write fewer each, asked again if the executor dies first). 0 = every answer (one more state write per model turn), off = none; else at least 1ms"},
		{"AGENTMESH_CHILD_REUSE", "off", []string{"dev", "executor"}, "off: each task gets a fresh agent process; agent: an agent process whose task completed may serve the next task of the same org and agent (same definition) after it killed every other process of its sandbox and emptied its workspace, /tmp and /dev/shm (strict isolation, no stdio MCP servers); parked ones end after 30s unclaimed"},
		{"AGENTMESH_SPAWNER", "fork-server", []string{"dev", "executor"}, "who starts the agent processes: fork-server (a small long-lived spawner process the executor starts and restarts; a spawn does not copy the executor's page tables) or direct (the executor forks them itself)"},
		{"AGENTMESH_AGENT_NICE", "10", []string{"dev", "executor"}, "how many nice steps below the executor the spawner and every agent process run (0-19; 0 = same priority): when the CPU is short, agents yield it to the control plane (the API stays responsive under load); applies with AGENTMESH_SPAWNER=fork-server"},
		{"AGENTMESH_AGENT_CPU_SHARES", "1024", []string{"dev", "executor"}, "CPU weight of all the executor's tasks together against the executor's own cgroup, in cgroup v1 cpu.shares units (2-262144; an ordinary group has 1024; cgroup v2 gets the equivalent cpu.weight); a weight, not a limit: idle CPU stays the agents'; below 1024 the API gains less than from AGENTMESH_AGENT_NICE and agent throughput drops (docs/benchmarks.md)"},
		{"AGENTMESH_TASK_MEMORY", "512MiB", []string{"dev", "executor"}, "memory limit of a task's whole process tree (strict isolation), e.g. 512MiB, 1G"},
		{"AGENTMESH_TOOL_MEMORY", "128MiB", []string{"dev", "executor"}, "memory limit of the programs code_run and shell run (strict isolation)"},
		{"AGENTMESH_TASK_PIDS", "256", []string{"dev", "executor"}, "process and thread limit of a task (strict isolation)"},
		{"AGENTMESH_TASK_DISK", "1GiB", []string{"dev", "executor"}, "size of a task's disk: its workspace, /tmp and /dev/shm share one tmpfs of this size (pages count against the writer's memory limit)"},
		{"AGENTMESH_TASK_CPU", "0.5", []string{"dev", "executor"}, "CPU share of a task (the agent process and its tools' programs together) in cores, enforced by the cgroup CPU controller"},
		{"AGENTMESH_SANDBOX_UIDS", "1000000000-1000065535", []string{"dev", "executor"}, "host uids (first-last) task sandboxes run as when the executor is root, one per running task; give each executor of a host its own range"},
		{"AGENTMESH_SANDBOX_CGROUP_POOL", "16", []string{"dev", "executor"}, "how many ended tasks' cgroup sets (strict isolation) the executor keeps and hands to later tasks instead of making new ones: only a set left empty, with no OOM kill or pids-limit hit and at most 4 MiB still charged, each to one task at a time with its host uid; 0-1024, 0 = make and remove each task's own"},
		{"AGENTMESH_SANDBOX_READ_PATHS", "", []string{"dev", "executor"}, "extra paths readable in the sandbox besides /usr, /bin, /sbin, /lib*, parts of /etc, /proc (e.g. where MCP servers are installed), bound into its fresh root at the same path, comma-separated (a path under /etc makes each sandbox bind the host's /etc entries one by one instead of the executor's snapshot)"},
		{"AGENTMESH_METRICS_LISTEN", "", []string{"*"}, "serve Prometheus metrics on http://ADDR/metrics (e.g. 0.0.0.0:9464); empty = off"},
		{"AGENTMESH_RETENTION", "720h", []string{"dev", "state"}, "finished tasks last changed longer ago are deleted with their history; 0 = keep for ever"},
		{"AGENTMESH_MEMORY_MAX_AGE", "0", []string{"dev", "state"}, "long-term memories older than this are deleted by the state service's retention sweep (every 10 minutes), e.g. 2160h; 0 = keep them for ever"},
		{"AGENTMESH_MEMORY_MAX_PER_SCOPE", "10000", []string{"dev", "state"}, "a memory scope (one task tree, one agent, the org) keeps at most this many memories, the newest; a remember beyond it deletes the oldest; -1 = no limit"},
		{"AGENTMESH_EMBEDDING_MODEL", "", []string{"dev", "executor"}, "embedding model of the memory tools remember and recall (OpenAI-compatible /v1/embeddings); empty = long-term memory off (in dev with the scripted model: its deterministic scripted-embedding, a testing aid)"},
		{"AGENTMESH_EMBEDDING_BASE_URL", "", []string{"dev", "executor"}, "OpenAI-compatible base URL of the embedding model; empty = AGENTMESH_MODEL_BASE_URL"},
		{"AGENTMESH_EMBEDDING_API_KEY", "", []string{"dev", "executor"}, "API key of the embedding endpoint; empty = the model's key when the embedding model is served at AGENTMESH_MODEL_BASE_URL"},
		{"AGENTMESH_EMBEDDING_DIMENSIONS", "", []string{"dev", "executor"}, "length of the embedding vectors, asked of the model and checked (a vector of another length is refused); empty = the model's own"},
		{"AGENTMESH_ORG_MAX_CONCURRENCY", "0", []string{"dev", "scheduler"}, "tasks one org may run at once across the cluster; 0 = no limit (orgs still share capacity fairly)"},
		{"AGENTMESH_ORG_LIMITS", "", []string{"dev", "scheduler"}, "per-org overrides of AGENTMESH_ORG_MAX_CONCURRENCY, e.g. acme=50,globex=5"},
		{"AGENTMESH_PRIORITY_AGING", "1m", []string{"dev", "scheduler"}, "a waiting task gains one priority level per this much waiting (anti-starvation); negative = no aging"},
		{"AGENTMESH_SCHEDULER_LEASE", "6s", []string{"dev", "scheduler"}, "leader lease of the scheduler replicas: a dead leader is replaced within about this long"},
		{"AGENTMESH_NODE_LABELS", "", []string{"dev", "executor"}, "labels of this executor node in its heartbeats, e.g. zone=a,gpu=none"},
		{"AGENTMESH_DRAIN_GRACE", "10s", []string{"dev", "executor"}, "on SIGTERM the executor takes no new work and lets running tasks finish for this long, then hands the rest back to the queue"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "", []string{"*"}, "OTLP endpoint of traces, e.g. http://jaeger:4318 (http/protobuf: /v1/traces is appended) or http://jaeger:4317 (grpc); unset (and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT unset) = no exporter, no spans (standard OpenTelemetry variable; see Watching agentmesh)"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", []string{"*"}, "OTLP endpoint of traces only, used as given (http/protobuf: the full URL, e.g. http://collector:4318/v1/traces); overrides OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", []string{"*"}, "OTLP protocol: http/protobuf or grpc (the specification's default is http/protobuf; a gRPC collector port such as 4317 needs grpc)"},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "", []string{"*"}, "OTLP protocol of traces (http/protobuf or grpc); overrides OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"OTEL_EXPORTER_OTLP_HEADERS", "", []string{"*"}, "headers of every OTLP export, key=value comma-separated (e.g. an API key of a hosted backend); OTEL_EXPORTER_OTLP_TRACES_HEADERS for traces only"},
		{"OTEL_EXPORTER_OTLP_INSECURE", "false", []string{"*"}, "grpc: true sends to an endpoint without a scheme in cleartext (an http:// endpoint is cleartext, https:// TLS, either way); also OTEL_EXPORTER_OTLP_CERTIFICATE, _CLIENT_CERTIFICATE, _CLIENT_KEY, _TIMEOUT, _COMPRESSION and their _TRACES_ forms, as the OpenTelemetry specification says"},
		{"OTEL_TRACES_EXPORTER", "", []string{"*"}, "otlp or none: none turns the export off whatever the endpoint; otlp without an endpoint exports to the protocol's default (localhost:4318 or :4317)"},
		{"OTEL_SDK_DISABLED", "false", []string{"*"}, "true turns tracing off (no exporter, no spans)"},
		{"OTEL_SERVICE_NAME", "", []string{"*"}, "service.name of every span of this process; unset = agentmesh-SERVICE (agentmesh-router, agentmesh-state, agentmesh-executor, \u2026: in agentmesh dev each service keeps its own name)"},
		{"OTEL_RESOURCE_ATTRIBUTES", "", []string{"*"}, "resource attributes added to every span, key=value comma-separated (e.g. deployment.environment.name=prod,service.namespace=team-a)"},
		{"OTEL_TRACES_SAMPLER", "parentbased_always_on", []string{"*"}, "sampler of new traces (always_on, always_off, traceidratio, parentbased_traceidratio, \u2026; OTEL_TRACES_SAMPLER_ARG: the ratio); a task's spans follow its trace's decision"},
		{"AGENTMESH_API_KEYS_FILE", "", []string{"dev", "router"}, "JSON file of hashed API keys with name, org and role (see Authentication); re-read when it changes and on SIGHUP"},
		{"AGENTMESH_TLS_CERT", "", []string{"dev", "router"}, "PEM certificate of the gRPC API; with AGENTMESH_TLS_KEY the API speaks TLS only"},
		{"AGENTMESH_TLS_KEY", "", []string{"dev", "router"}, "PEM private key of AGENTMESH_TLS_CERT"},
		{"AGENTMESH_TLS_CLIENT_CA", "", []string{"dev", "router"}, "PEM CA bundle: clients must present a certificate it signed (mutual TLS)"},
		{"AGENTMESH_MAX_CONNECTIONS", "4096", []string{"dev", "router"}, "connections the API holds at most (never more than the open-file limit allows); when full, the oldest connection that never authenticated makes room"},
		{"AGENTMESH_AUTH_TIMEOUT", "10s", []string{"dev", "router"}, "a connection that has made no authenticated RPC this long after it was accepted is closed"},
		{"AGENTMESH_ORG_RATE", "100", []string{"dev", "router"}, "requests per second each org may make (burst twice that); -1 = unlimited"},
		{"AGENTMESH_MAX_WATCHES_PER_ORG", "256", []string{"dev", "router"}, "WatchTask streams an org may hold open at once (SSE event streams count too)"},
		{"AGENTMESH_HTTP_LISTEN", "", []string{"dev", "router"}, "HTTP listen address of the REST/JSON API, SSE event streams and the other HTTP doors (same keys, roles, TLS, limits as gRPC); empty = 127.0.0.1:7480 for dev, none for router; off = none"},
		{"AGENTMESH_HTTP_CORS_ORIGINS", "", []string{"dev", "router"}, "origins browsers may call the HTTP API from (http(s)://host[:port], comma-separated, or *); empty = no CORS headers (browsers refuse cross-origin calls)"},
		{"AGENTMESH_UI", "on", []string{"dev", "router"}, "the web dashboard at /ui/ of the HTTP listener (sign in with an API key): on or off"},
		{"AGENTMESH_UI_SECRET", "", []string{"dev", "router"}, "secret (at least 32 bytes, e.g. openssl rand -base64 32) that seals the dashboard's session cookies (AES-256-GCM); give every router replica the same one; empty = a random one per process (sessions end with it and hold on that replica only)"},
		{"AGENTMESH_UI_SESSION_IDLE", "30m", []string{"dev", "router"}, "a dashboard session unused this long ends (at least 1m)"},
		{"AGENTMESH_UI_SESSION_MAX", "12h", []string{"dev", "router"}, "a dashboard session ends this long after sign-in, used or not (at least 1m)"},
	}
}

// Commands lists the agentmesh subcommands a user runs. ("child" is the
// hidden subcommand the executor re-executes itself as.)
func Commands() []string {
	return []string{"dev", "state", "registry", "scheduler", "executor", "router", "scripted-model", "bus", "version"}
}
