#!/usr/bin/env python3
"""Split Go CPU profiles of the server into an exclusive budget per task
(docs/benchmarks.md, "The control plane's cost per task").

    python3 docs/bench/pprof_budget.py BINARY PROF[,PROF...] [MS_PER_TASK]

Each sample of `go tool pprof -traces` goes to the first category whose
pattern appears anywhere on its stack (the order below decides); a second
view gives each sample to its owner, the outermost agentmesh package on the
stack. With MS_PER_TASK (ambench's "CPU per task: server"), the shares are
also printed in ms per task."""
import re, subprocess, sys, collections
binary, prof = sys.argv[1], sys.argv[2].split(",")
per_task = float(sys.argv[3]) if len(sys.argv) > 3 else None
out = subprocess.run(["go","tool","pprof","-traces",binary]+prof,capture_output=True,text=True).stdout
CATS = [
 ("GC (background mark, assists)", r"runtime\.gcBgMarkWorker|runtime\.gcAssistAlloc|runtime\.bgsweep|runtime\.bgscavenge"),
 ("scripted model + its HTTP (not agentmesh's)", r"scriptedmodel"),
 ("JetStream: file store writes", r"\(\*fileStore\)|\(\*msgBlock\)"),
 ("JetStream: stream/consumer processing", r"nats-server/v2/server\.\(\*stream\)|nats-server/v2/server\.\(\*consumer\)|processJetStream|jsStreamInfo|\(\*jetStream\)|\(\*raft\)"),
 ("NATS server: client IO, parsing, routing", r"nats-server/v2/server\."),
 ("event encoding (protojson marshal)", r"bus\.NewEventMsg|protojson\.MarshalOptions|protojson\.Marshal"),
 ("event decoding (protojson unmarshal)", r"bus\.DecodeEvent|protojson\.Unmarshal"),
 ("audit capture (bus.Audited's publish)", r"bus\.Audited\.func1$"),
 ("spawn/sandbox (executor side)", r"executor/spawner|executor/sandbox|os/exec|syscall\.forkExec"),
 ("model client (executor/llm, net/http client)", r"executor/llm|net/http\.\(\*persistConn\)|net/http\.\(\*Transport\)"),
 ("gRPC (router API, streams)", r"google\.golang\.org/grpc"),
 ("protobuf binary (bus requests/replies, records)", r"google\.golang\.org/protobuf/proto\.|google\.golang\.org/protobuf/internal/impl"),
 ("NATS client (publish, request, read loop)", r"nats-io/nats\.go"),
 ("state service (+ store)", r"agentmesh/services/state"),
 ("scheduler", r"agentmesh/services/scheduler"),
 ("registry", r"agentmesh/services/registry"),
 ("router (hub, watchers)", r"agentmesh/services/router"),
 ("executor (rest)", r"agentmesh/services/executor"),
 ("runtime (scheduler, timers, syscalls, other)", r"."),
]
pat = [(n, re.compile(p)) for n,p in CATS]
tot = collections.Counter(); alloc = 0.0; total = 0.0
unit = {"ns":1e-6,"us":1e-3,"µs":1e-3,"ms":1.0,"s":1000.0}

def samples():
    """Yields (value in ms, frames leaf first) of each stack in out."""
    for block in out.split("-----------+-------------------------------------------------------"):
        lines = [l for l in block.strip("\n").split("\n") if l.strip()]
        if not lines: continue
        m = re.match(r"\s*([\d.]+)(ns|us|µs|ms|s)\s+(.*)", lines[0])
        if not m: continue
        yield float(m.group(1))*unit[m.group(2)], [m.group(3).strip()] + [l.strip() for l in lines[1:]]

for v, frames in samples():
    total += v
    if any(f.startswith("runtime.mallocgc") for f in frames): alloc += v
    for n,p in pat:
        if any(p.search(f) for f in frames):
            tot[n] += v; break
print(f"total {total:.0f} ms of samples; allocation (mallocgc, across all): {100*alloc/total:.1f}%")
for n,_ in CATS:
    v = tot[n]
    s = f"{100*v/total:5.1f}%  {n}"
    if per_task: s += f"   {per_task*v/total:.2f} ms/task"
    print(s)

# Second view: the owner — the outermost agentmesh service (or the NATS
# server, gRPC, the GC) on the stack, from the root.
own = collections.Counter()
for v, frames in samples():
    o = None
    for f in reversed(frames):
        mm = re.search(r"agentmesh/agentmesh/(services/[a-z]+|pkg/[a-z]+)", f)
        if mm: o = mm.group(1); break
    if o is None:
        j = " ".join(frames)
        if "gcBgMarkWorker" in j or "bgsweep" in j or "bgscavenge" in j: o = "GC workers"
        elif "nats-server" in j: o = "NATS server"
        elif "nats.go" in j: o = "NATS client read loop (dispatch to handlers)"
        elif "google.golang.org/grpc" in j: o = "gRPC transport"
        elif "net/http" in j: o = "net/http"
        else: o = "runtime/other"
    own[o] += v
print("\nby owner:")
for o,v in own.most_common():
    s = f"{100*v/total:5.1f}%  {o}"
    if per_task: s += f"   {per_task*v/total:.2f} ms/task"
    print(s)
