// Package vecindex is the state service's exact nearest-neighbour search
// over one org's memories: every memory's embedding, normalised to unit
// length, in one flat float32 array per embedding model, compared with the
// query by dot product (= cosine similarity) — no approximation, so the
// best k are the best k. The cost is linear: n × dimensions
// multiply-adds per search, spread over the machine's cores when n is
// large (docs/memory.md, docs/benchmarks.md). Each entry keeps its memory
// (without the embedding) so hits need no read of the store.
//
// pgvector is not used (not installable on the Debian 12 build machines);
// an ANN index (HNSW) there or here would trade exactness for sub-linear
// cost.
package vecindex

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// ErrVector: an embedding that cannot be indexed (empty, not finite, all
// zeros, of another dimension than the model's other memories).
var ErrVector = errors.New("bad embedding")

// Normalize returns v scaled to unit length, or ErrVector.
func Normalize(v []float32) ([]float32, error) {
	if len(v) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrVector)
	}
	var sum float64
	for _, x := range v {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: not a finite number", ErrVector)
		}
		sum += f * f
	}
	if sum == 0 {
		return nil, fmt.Errorf("%w: all zeros", ErrVector)
	}
	inv := 1 / math.Sqrt(sum)
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out, nil
}

// Encode is v as float32 little-endian bytes (how the stores keep it).
func Encode(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// Decode reads Encode's bytes.
func Decode(b []byte) ([]float32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a float32 vector", ErrVector, len(b))
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

// dotGo is the dot product of two vectors of the same length, in Go
// (four accumulators; Dot uses it where there is no AVX2).
func dotGo(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3
}

// Index holds one org's memories, by embedding model. It is safe for
// concurrent use: searches share a read lock, changes take the write lock.
type Index struct {
	mu     sync.RWMutex
	models map[string]*flat
}

// flat is one model's memories: vecs holds entry i's vector at
// [i*dims, (i+1)*dims).
type flat struct {
	dims int
	vecs []float32
	mems []*agentmeshv1.Memory
	pos  map[string]int
}

// New returns an empty index.
func New() *Index { return &Index{models: map[string]*flat{}} }

// Dimensions is the length of model's vectors (0: it has none yet).
func (x *Index) Dimensions(model string) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if f := x.models[model]; f != nil && len(f.mems) > 0 {
		return f.dims
	}
	return 0
}

// Len is how many memories the index holds.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := 0
	for _, f := range x.models {
		n += len(f.mems)
	}
	return n
}

// Add indexes m with its unit vector v (replacing an entry of the same
// id). A vector whose length differs from the model's others is refused.
func (x *Index) Add(m *agentmeshv1.Memory, v []float32) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.remove(m.GetId())
	f := x.models[m.GetEmbeddingModel()]
	if f == nil || len(f.mems) == 0 {
		f = &flat{dims: len(v), pos: map[string]int{}}
		x.models[m.GetEmbeddingModel()] = f
	}
	if len(v) != f.dims {
		return fmt.Errorf("%w: %d dimensions; the org's memories of model %q have %d", ErrVector, len(v), m.GetEmbeddingModel(), f.dims)
	}
	f.pos[m.GetId()] = len(f.mems)
	f.mems = append(f.mems, m)
	f.vecs = append(f.vecs, v...)
	return nil
}

// Remove drops the memory id; it reports whether it was there.
func (x *Index) Remove(id string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.remove(id)
}

func (x *Index) remove(id string) bool {
	for _, f := range x.models {
		i, ok := f.pos[id]
		if !ok {
			continue
		}
		last := len(f.mems) - 1
		if i != last {
			f.mems[i] = f.mems[last]
			copy(f.vecs[i*f.dims:(i+1)*f.dims], f.vecs[last*f.dims:])
			f.pos[f.mems[i].GetId()] = i
		}
		f.mems[last] = nil
		f.mems = f.mems[:last]
		f.vecs = f.vecs[:last*f.dims]
		delete(f.pos, id)
		return true
	}
	return false
}

// Get returns the memory id, if indexed.
func (x *Index) Get(id string) *agentmeshv1.Memory {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, f := range x.models {
		if i, ok := f.pos[id]; ok {
			return f.mems[i]
		}
	}
	return nil
}

// Each calls fn for every memory (of every model) until fn returns false.
func (x *Index) Each(fn func(*agentmeshv1.Memory) bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, f := range x.models {
		for _, m := range f.mems {
			if !fn(m) {
				return
			}
		}
	}
}

// Hit is a memory and its similarity to the query.
type Hit struct {
	Memory *agentmeshv1.Memory
	Score  float32
}

// parallelAbove: searches over more entries than this are split across
// the cores.
const parallelAbove = 16384

// Search returns the k memories of model most similar to the unit vector
// q among those keep accepts (nil: all), best first (ties by id), and how
// many were compared. A query of another dimension is refused.
func (x *Index) Search(model string, q []float32, k int, keep func(*agentmeshv1.Memory) bool) ([]Hit, int, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	f := x.models[model]
	if f == nil || len(f.mems) == 0 {
		return nil, 0, nil
	}
	if len(q) != f.dims {
		return nil, 0, fmt.Errorf("%w: the query has %d dimensions; the org's memories of model %q have %d", ErrVector, len(q), model, f.dims)
	}
	n := len(f.mems)
	parts := 1
	if n > parallelAbove {
		parts = min(runtime.GOMAXPROCS(0), n/parallelAbove+1)
	}
	tops := make([]topK, parts)
	counts := make([]int, parts)
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := p*n/parts, (p+1)*n/parts
		wg.Go(func() { counts[p] = f.scan(q, lo, hi, k, keep, &tops[p]) })
	}
	wg.Wait()
	all := topK{}
	compared := 0
	for p := range parts {
		compared += counts[p]
		for _, h := range tops[p] {
			all.offer(h, k)
		}
	}
	return all.sorted(), compared, nil
}

// scan compares q with entries [lo, hi) into top; it returns how many it
// compared.
func (f *flat) scan(q []float32, lo, hi, k int, keep func(*agentmeshv1.Memory) bool, top *topK) int {
	d := f.dims
	n := 0
	for i := lo; i < hi; i++ {
		m := f.mems[i]
		if keep != nil && !keep(m) {
			continue
		}
		n++
		top.offer(Hit{Memory: m, Score: Dot(q, f.vecs[i*d:(i+1)*d])}, k)
	}
	return n
}

// topK is a min-heap of the best hits so far.
type topK []Hit

func (t topK) Len() int { return len(t) }
func (t topK) Less(i, j int) bool {
	if t[i].Score != t[j].Score {
		return t[i].Score < t[j].Score
	}
	return t[i].Memory.GetId() > t[j].Memory.GetId()
}
func (t topK) Swap(i, j int) { t[i], t[j] = t[j], t[i] }
func (t *topK) Push(x any)   { *t = append(*t, x.(Hit)) }
func (t *topK) Pop() any {
	old := *t
	h := old[len(old)-1]
	*t = old[:len(old)-1]
	return h
}

func (t *topK) offer(h Hit, k int) {
	if len(*t) < k {
		heap.Push(t, h)
		return
	}
	worst := (*t)[0]
	if h.Score > worst.Score || (h.Score == worst.Score && h.Memory.GetId() < worst.Memory.GetId()) {
		(*t)[0] = h
		heap.Fix(t, 0)
	}
}

// sorted empties the heap, best first.
func (t *topK) sorted() []Hit {
	out := make([]Hit, t.Len())
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(t).(Hit)
	}
	return out
}
