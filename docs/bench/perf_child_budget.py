"""Split the agent child's samples of a system-wide perf profile into a
budget (docs/benchmarks.md, "The control plane's cost per task").

    perf record -a -g -F 499 -o perf.data -- sleep 12   # during a fresh-child load
    perf script -i perf.data --comms 3 -F ip,sym > child.stacks   # the child runs as "3" (exec'd from its descriptor)
    python3 docs/bench/perf_child_budget.py child.stacks [MS_PER_TASK]

Each sample goes to the first category whose pattern appears on its stack."""
import re, sys, collections
CATS = [
 ("prewarm (protobuf coders for every frame kind, before Start)", r"child\.prewarm"),
 ("package initialisation (runtime.doInit)", r"runtime\.doInit"),
 ("session keyring (all threads)", r"newSessionKeyring"),
 ("Landlock (restrictFS, all threads)", r"restrictFS|landlock"),
 ("fresh root (tmpfs, binds, pivot_root)", r"buildRoot|sandbox\.bind|pivot|mountDisk|mountDev"),
 ("other sandbox steps (seccomp, caps, fds, cgroups)", r"executor/sandbox\."),
 ("Go runtime start (schedinit, heap, first threads)", r"runtime\.schedinit|runtime\.rt0_go|runtime\.mallocinit|runtime\.gcenable"),
 ("exec (loading the binary)", r"execve|bprm|load_elf|begin_new_exec"),
 ("exit (address space torn down)", r"do_exit|do_group_exit|exit_mmap|mmput"),
 ("the task: frames, model/tool exchange, protobuf", r"executor/child|childv1|google\.golang\.org/protobuf|agentmesh/pkg/"),
 ("GC", r"gcBgMarkWorker|gcAssist"),
 ("thread start and scheduler (runtime, kernel)", r"runtime\.mstart|newosproc|runtime\.schedule|runtime\.findRunnable|runtime\.mcall|clone|sched_yield|osyield"),
 ("page faults elsewhere", r"exc_page_fault"),
 ("rest (incl. unresolved frames)", r"."),
]
pat=[(n,re.compile(p)) for n,p in CATS]
tot=collections.Counter(); n=0
for s in open(sys.argv[1]).read().split("\n\n"):
    fr=[l.split(None,1)[1] if len(l.split(None,1))>1 else "" for l in s.strip().split("\n") if l.strip()]
    if not fr: continue
    n+=1
    for name,p in pat:
        if any(p.search(f) for f in fr):
            tot[name]+=1; break
per=float(sys.argv[2]) if len(sys.argv)>2 else None
print(f"{n} samples")
for name,_ in CATS:
    v=tot[name]; s=f"{100*v/n:5.1f}%  {name}"
    if per: s+=f"   {per*v/n:.2f} ms/task"
    print(s)
