package sandbox

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// IDRange is a range of host uids (and the gids of the same numbers) that
// task sandboxes are mapped to, one per running task.
type IDRange struct {
	First, Count int
}

// DefaultUIDs is the range an executor running as root takes task uids
// from when none is configured: clear of the system's, of the users' and
// of the subordinate ids useradd hands out (100000 + 65536·n).
var DefaultUIDs = IDRange{First: 1_000_000_000, Count: 65536}

func (r IDRange) String() string {
	return fmt.Sprintf("%d-%d", r.First, r.First+r.Count-1)
}

// ParseIDRange parses "first-last" (e.g. 100000-165535).
func ParseIDRange(s string) (IDRange, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return IDRange{}, fmt.Errorf("uid range %q: want first-last, e.g. 100000-165535", s)
	}
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	switch {
	case err1 != nil || err2 != nil:
		return IDRange{}, fmt.Errorf("uid range %q: want first-last, two numbers", s)
	case first == 0:
		return IDRange{}, fmt.Errorf("uid range %q: must not include uid 0 (root)", s)
	case last < first:
		return IDRange{}, fmt.Errorf("uid range %q: the last uid is below the first", s)
	case last >= 1<<32-1:
		return IDRange{}, fmt.Errorf("uid range %q: uid %d is out of range", s, last)
	}
	return IDRange{First: int(first), Count: int(last-first) + 1}, nil
}

// uidPool hands out the uids of a range, each to one task at a time.
type uidPool struct {
	r    IDRange
	mu   sync.Mutex
	used map[int]bool
	next int
}

func newUIDPool(r IDRange) *uidPool { return &uidPool{r: r, used: map[int]bool{}} }

// get returns a free uid of the range.
func (p *uidPool) get() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i < p.r.Count; i++ {
		n := (p.next + i) % p.r.Count
		if !p.used[n] {
			p.used[n] = true
			p.next = n + 1
			return p.r.First + n, nil
		}
	}
	return 0, fmt.Errorf("sandbox: all %d uids of the range %s are in use (widen AGENTMESH_SANDBOX_UIDS)", p.r.Count, p.r)
}

func (p *uidPool) put(uid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.used, uid-p.r.First)
}
