// Package taskgraph checks a graph of tasks submitted together: every
// reference resolves, and there is no cycle. Order returns the tasks in an
// order where each comes after the tasks it depends on (Kahn's algorithm),
// in O(tasks + edges).
package taskgraph

import (
	"fmt"
	"slices"
	"strings"
)

// RefPrefix marks a depends_on entry naming another task of the same
// request by its ref.
const RefPrefix = "ref:"

// CycleError names the tasks of one cycle, in dependency order, the first
// repeated at the end ("a → b → a").
type CycleError struct {
	Refs []string
}

func (e *CycleError) Error() string {
	return "dependency cycle: " + strings.Join(e.Refs, " → ")
}

// UnknownRefError names a "ref:" that no task of the request has.
type UnknownRefError struct {
	Task, Ref string
}

func (e *UnknownRefError) Error() string {
	return fmt.Sprintf("task %q depends on %q, which no task of the request has", e.Task, RefPrefix+e.Ref)
}

// Order returns the indexes of refs in dependency order. deps[i] lists the
// depends_on entries of task i; entries with RefPrefix name other tasks of
// the graph, others (existing task ids) are ignored here. A task that
// depends on itself is a cycle of one.
func Order(refs []string, deps [][]string) ([]int, error) {
	n := len(refs)
	idx := make(map[string]int, n)
	for i, r := range refs {
		idx[r] = i
	}
	// children[p] are the tasks that depend on p; indeg[c] counts c's
	// parents inside the graph.
	children := make([][]int, n)
	indeg := make([]int, n)
	for c := range n {
		for _, d := range deps[c] {
			ref, ok := strings.CutPrefix(d, RefPrefix)
			if !ok {
				continue
			}
			p, ok := idx[ref]
			if !ok {
				return nil, &UnknownRefError{Task: refs[c], Ref: ref}
			}
			children[p] = append(children[p], c)
			indeg[c]++
		}
	}
	order := make([]int, 0, n)
	for i := range n {
		if indeg[i] == 0 {
			order = append(order, i)
		}
	}
	for k := 0; k < len(order); k++ {
		for _, c := range children[order[k]] {
			if indeg[c]--; indeg[c] == 0 {
				order = append(order, c)
			}
		}
	}
	if len(order) == n {
		return order, nil
	}
	return nil, findCycle(refs, deps, idx, indeg)
}

// findCycle walks parent links among the tasks left with indegree > 0
// (each of them has a parent left too) until a task repeats.
func findCycle(refs []string, deps [][]string, idx map[string]int, indeg []int) error {
	start := -1
	for i, d := range indeg {
		if d > 0 {
			start = i
			break
		}
	}
	seen := map[int]int{} // task → position on the path
	var path []int
	for cur := start; ; {
		if pos, ok := seen[cur]; ok {
			cyc := path[pos:]
			out := make([]string, 0, len(cyc)+1)
			// path follows parent links; print in dependency order.
			for i := len(cyc) - 1; i >= 0; i-- {
				out = append(out, refs[cyc[i]])
			}
			out = append(out, out[0])
			return &CycleError{Refs: out}
		}
		seen[cur] = len(path)
		path = append(path, cur)
		next := -1
		for _, d := range deps[cur] {
			if ref, ok := strings.CutPrefix(d, RefPrefix); ok {
				if p := idx[ref]; indeg[p] > 0 {
					next = p
					break
				}
			}
		}
		if next < 0 { // cannot happen: a leftover task has a leftover parent
			return &CycleError{Refs: []string{refs[cur]}}
		}
		cur = next
	}
}

// Dedup returns deps without repeats, in first-seen order.
func Dedup(deps []string) []string {
	out := make([]string, 0, len(deps))
	for _, d := range deps {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}
