package vecindex

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
)

func mem(id, scope string) *agentmeshv1.Memory {
	return &agentmeshv1.Memory{Id: id, Scope: scope, EmbeddingModel: "m"}
}

func randUnit(r *rand.Rand, dims int) []float32 {
	v := make([]float32, dims)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	u, _ := Normalize(v)
	return u
}

// The index finds exactly what a brute-force ranking finds, across the
// parallel split, with a filter, after removals.
func TestSearchIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n, dims = 40000, 32
	x := New()
	vecs := map[string][]float32{}
	for i := range n {
		id := fmt.Sprintf("m%05d", i)
		scope := "agent"
		if i%3 == 0 {
			scope = "org"
		}
		v := randUnit(r, dims)
		vecs[id] = v
		if err := x.Add(mem(id, scope), v); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i += 7 {
		id := fmt.Sprintf("m%05d", i)
		if !x.Remove(id) {
			t.Fatalf("Remove %s: not there", id)
		}
		delete(vecs, id)
	}
	if x.Len() != len(vecs) {
		t.Fatalf("Len = %d, want %d", x.Len(), len(vecs))
	}
	q := randUnit(r, dims)
	keep := func(m *agentmeshv1.Memory) bool { return m.Scope == "agent" }
	hits, compared, err := x.Search("m", q, 10, keep)
	if err != nil {
		t.Fatal(err)
	}
	type scored struct {
		id string
		s  float32
	}
	var want []scored
	for id, v := range vecs {
		if m := x.Get(id); m.Scope == "agent" {
			want = append(want, scored{id, Dot(q, v)})
		}
	}
	sort.Slice(want, func(i, j int) bool {
		if want[i].s != want[j].s {
			return want[i].s > want[j].s
		}
		return want[i].id < want[j].id
	})
	if compared != len(want) {
		t.Errorf("compared %d, want %d (the memories the filter keeps)", compared, len(want))
	}
	for i, h := range hits {
		if h.Memory.Id != want[i].id || h.Score != want[i].s {
			t.Fatalf("hit %d: %s %.6f, want %s %.6f", i, h.Memory.Id, h.Score, want[i].id, want[i].s)
		}
	}
}

// A small corpus with known answers, embedded as the scripted model does:
// each question finds its fact first.
func TestRanksTheRelevantMemoryFirst(t *testing.T) {
	facts := map[string]string{
		"colour":  "The user's favourite colour is green.",
		"pet":     "The user has a cat called Miso.",
		"db":      "Production runs Postgres 15 on two replicas.",
		"meeting": "The weekly planning meeting is on Tuesday at 10.",
		"lang":    "The team writes its services in Go.",
	}
	x := New()
	for id, text := range facts {
		m := mem(id, "agent")
		m.Text = text
		if err := x.Add(m, scriptedmodel.HashEmbed(text, 256)); err != nil {
			t.Fatal(err)
		}
	}
	for q, want := range map[string]string{
		"what is my favourite colour":               "colour",
		"what is the name of the user's cat":        "pet",
		"which Postgres version runs in production": "db",
		"when is the planning meeting":              "meeting",
		"what language are the services written in": "lang",
	} {
		hits, _, err := x.Search("m", scriptedmodel.HashEmbed(q, 256), 3, nil)
		if err != nil || len(hits) == 0 || hits[0].Memory.Id != want {
			var got []string
			for _, h := range hits {
				got = append(got, fmt.Sprintf("%s %.2f", h.Memory.Id, h.Score))
			}
			t.Errorf("%q: got %v, %v; want %s first", q, got, err, want)
		}
	}
}

func TestDimensionsAndVectors(t *testing.T) {
	x := New()
	if err := x.Add(mem("a", "org"), []float32{1, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if err := x.Add(mem("b", "org"), []float32{1, 0}); !errors.Is(err, ErrVector) {
		t.Errorf("Add of another dimension: got %v, want ErrVector", err)
	}
	if _, _, err := x.Search("m", []float32{1, 0}, 1, nil); !errors.Is(err, ErrVector) {
		t.Errorf("Search with another dimension: got %v, want ErrVector", err)
	}
	if hits, _, err := x.Search("other-model", []float32{1, 0}, 1, nil); err != nil || len(hits) != 0 {
		t.Errorf("Search of a model without memories: got %v, %v; want nothing", hits, err)
	}
	for _, bad := range [][]float32{nil, {0, 0}, {float32NaN()}} {
		if _, err := Normalize(bad); !errors.Is(err, ErrVector) {
			t.Errorf("Normalize(%v): got %v, want ErrVector", bad, err)
		}
	}
	v := []float32{0.5, -2, 3.25}
	got, err := Decode(Encode(v))
	if err != nil || !slices.Equal(got, v) {
		t.Errorf("Decode(Encode(%v)) = %v, %v", v, got, err)
	}
	if _, err := Decode([]byte{1, 2, 3}); !errors.Is(err, ErrVector) {
		t.Errorf("Decode of 3 bytes: got %v", err)
	}
}

func float32NaN() float32 {
	var zero float32
	return zero / zero
}

// BenchmarkSearch100k is recall's search over 100,000 memories of one org
// (docs/benchmarks.md): DIMS 256 (the scripted model's), 768 and 1536.
func BenchmarkSearch100k(b *testing.B) {
	for _, dims := range []int{256, 768, 1536} {
		b.Run(fmt.Sprintf("dims=%d", dims), func(b *testing.B) {
			r := rand.New(rand.NewPCG(3, 4))
			x := New()
			for i := range 100000 {
				if err := x.Add(mem(fmt.Sprintf("m%06d", i), "agent"), randUnit(r, dims)); err != nil {
					b.Fatal(err)
				}
			}
			q := randUnit(r, dims)
			keep := func(m *agentmeshv1.Memory) bool { return m.Scope == "agent" }
			b.ResetTimer()
			for b.Loop() {
				if _, _, err := x.Search("m", q, 5, keep); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Dot (AVX2 and FMA where the machine has them) equals the Go loop to
// float32 rounding, for every length up to past a few blocks, unaligned.
func TestDotMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	buf := make([]float32, 1+300*2)
	for i := range buf {
		buf[i] = float32(r.NormFloat64())
	}
	for n := 0; n <= 300; n++ {
		a, b := buf[1:1+n], buf[1+n:1+2*n]
		got, want := Dot(a, b), dotGo(a, b)
		if d := got - want; d > 1e-4*float32(n+1) || d < -1e-4*float32(n+1) {
			t.Fatalf("n=%d: Dot %v, dotGo %v", n, got, want)
		}
	}
	t.Logf("AVX2 and FMA in use: %v", useAVX2AndFMA())
}

// BenchmarkDot256 is one comparison of 256-dimension vectors: Dot (AVX2
// where the machine has it) and the Go loop.
func BenchmarkDot256(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	x, y := randUnit(r, 256), randUnit(r, 256)
	var s float32
	b.Run("Dot", func(b *testing.B) {
		for b.Loop() {
			s += Dot(x, y)
		}
	})
	b.Run("Go", func(b *testing.B) {
		for b.Loop() {
			s += dotGo(x, y)
		}
	})
	_ = s
}
