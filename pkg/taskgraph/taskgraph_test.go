package taskgraph

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestOrder(t *testing.T) {
	tests := []struct {
		name    string
		refs    []string
		deps    [][]string
		wantErr string
	}{
		{"diamond", []string{"d", "b", "c", "a"}, [][]string{{"ref:b", "ref:c"}, {"ref:a"}, {"ref:a"}, nil}, ""},
		{"existing ids are not refs", []string{"a"}, [][]string{{"01HXYZ"}}, ""},
		{"self", []string{"a"}, [][]string{{"ref:a"}}, "dependency cycle: a → a"},
		{"two", []string{"a", "b"}, [][]string{{"ref:b"}, {"ref:a"}}, "dependency cycle: "},
		{"three behind a root", []string{"r", "x", "y", "z"}, [][]string{nil, {"ref:r", "ref:z"}, {"ref:x"}, {"ref:y"}}, "dependency cycle: "},
		{"unknown", []string{"a"}, [][]string{{"ref:nope"}}, `task "a" depends on "ref:nope", which no task of the request has`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			order, err := Order(tt.refs, tt.deps)
			if tt.wantErr != "" {
				if err == nil || len(err.Error()) < len(tt.wantErr) || err.Error()[:len(tt.wantErr)] != tt.wantErr {
					t.Fatalf("err = %v, want prefix %q", err, tt.wantErr)
				}
				var ce *CycleError
				if errors.As(err, &ce) && ce.Refs[0] != ce.Refs[len(ce.Refs)-1] {
					t.Fatalf("cycle %v does not close", ce.Refs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pos := map[string]int{}
			for i, k := range order {
				pos[tt.refs[k]] = i
			}
			for c, ds := range tt.deps {
				for _, d := range ds {
					if p, ok := pos[d[len("ref:"):]]; ok && len(d) > 4 && d[:4] == "ref:" && p > pos[tt.refs[c]] {
						t.Errorf("%s ordered before its parent %s", tt.refs[c], d)
					}
				}
			}
		})
	}
}

func TestCycleNamesItsMembers(t *testing.T) {
	_, err := Order([]string{"r", "x", "y", "z"}, [][]string{nil, {"ref:r", "ref:z"}, {"ref:x"}, {"ref:y"}})
	var ce *CycleError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a CycleError", err)
	}
	got := slices.Clone(ce.Refs[:len(ce.Refs)-1])
	slices.Sort(got)
	if !slices.Equal(got, []string{"x", "y", "z"}) {
		t.Fatalf("cycle = %v, want x, y, z", ce.Refs)
	}
}

// graph builds n tasks, each depending on up to 3 earlier ones.
func graph(n int) ([]string, [][]string) {
	refs := make([]string, n)
	deps := make([][]string, n)
	for i := range n {
		refs[i] = fmt.Sprintf("t%d", i)
		for _, j := range []int{i - 1, i / 2, i - 7} {
			if j >= 0 && j < i {
				deps[i] = append(deps[i], "ref:"+refs[j])
			}
		}
	}
	// Reverse so the order has work to do.
	slices.Reverse(refs)
	slices.Reverse(deps)
	return refs, deps
}

func TestLargeGraph(t *testing.T) {
	refs, deps := graph(10000)
	order, err := Order(refs, deps)
	if err != nil || len(order) != 10000 {
		t.Fatalf("order of %d, err %v", len(order), err)
	}
}

// BenchmarkOrder10k checks a 10,000-task graph (about 30,000 edges).
func BenchmarkOrder10k(b *testing.B) {
	refs, deps := graph(10000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Order(refs, deps); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzOrder: any graph either orders (every ref after its parents) or is
// refused with a cycle or unknown-ref error; nothing panics.
func FuzzOrder(f *testing.F) {
	f.Add("a b c", "b;c;")
	f.Add("a b", "b;a")
	f.Add("a", "a")
	f.Add("x y", "zz;")
	f.Fuzz(func(t *testing.T, refsText, depsText string) {
		refs := strings.Fields(refsText)
		if len(refs) == 0 || len(refs) > 200 {
			return
		}
		parts := strings.Split(depsText, ";")
		deps := make([][]string, len(refs))
		for i := range refs {
			if i < len(parts) {
				for _, d := range strings.Fields(parts[i]) {
					deps[i] = append(deps[i], RefPrefix+d)
				}
			}
		}
		order, err := Order(refs, deps)
		if err != nil {
			var ce *CycleError
			var ue *UnknownRefError
			if !errors.As(err, &ce) && !errors.As(err, &ue) {
				t.Fatalf("unexpected error %T %v", err, err)
			}
			if ce != nil && (len(ce.Refs) < 2 || ce.Refs[0] != ce.Refs[len(ce.Refs)-1]) {
				t.Fatalf("cycle %v does not close", ce.Refs)
			}
			return
		}
		// Duplicate refs make positions ambiguous; check only unique ones.
		pos := map[string]int{}
		dup := map[string]bool{}
		for i, k := range order {
			if _, ok := pos[refs[k]]; ok {
				dup[refs[k]] = true
			}
			pos[refs[k]] = i
		}
		if len(order) != len(refs) {
			t.Fatalf("order has %d of %d tasks", len(order), len(refs))
		}
		for c, ds := range deps {
			for _, d := range ds {
				p := strings.TrimPrefix(d, RefPrefix)
				if dup[p] || dup[refs[c]] {
					continue
				}
				if pos[p] > pos[refs[c]] {
					t.Fatalf("%s ordered before its parent %s", refs[c], p)
				}
			}
		}
	})
}
