package scriptedmodel

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"net/http"
	"strings"
	"unicode"
)

// The embeddings endpoint (POST /v1/embeddings): a TESTING AND DEMO AID,
// not a model. Its vectors are hashed bags of words — each word (lower
// case, letters and digits, a final "s" dropped, common English words left
// out) adds ±1 at the coordinate its FNV-1a hash picks, and the vector is
// normalised — so two texts are similar exactly as far as they share
// words. That is deterministic, needs no weights, and ranks "what is my
// favourite colour" closest to "the user's favourite colour is green"; it
// knows no synonyms. Requests and answers are OpenAI's wire format
// ("input" a string or a list of strings; "dimensions" optional).

// DefaultEmbeddingDimensions is the length of the vectors unless the script
// or the request says otherwise.
const DefaultEmbeddingDimensions = 256

// MaxEmbeddingDimensions bounds a request's dimensions.
const MaxEmbeddingDimensions = 8192

// stopwords are left out of the bag of words.
var stopwords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an the and or but if of to in on at by for with from as is are was were be been
		being it its this that these those i me my we our you your he she his her they them their what which who whom
		do does did have has had not no so than then there here how when where why can could will would should shall
		may might must about into over under again just also very all any each some such only own same too up down out`) {
		stopwords[w] = true
	}
}

// HashEmbed is the scripted model's embedding of text: a hashed bag of
// words of dims coordinates, unit length (all zeros for a text with no
// word left).
func HashEmbed(text string, dims int) []float32 {
	v := make([]float32, dims)
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for _, w := range words {
		if stopwords[w] {
			continue
		}
		if len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") {
			w = w[:len(w)-1]
		}
		h := fnv.New64a()
		_, _ = h.Write([]byte(w))
		sum := h.Sum64()
		i := int(sum % uint64(dims))
		if sum>>63 == 1 {
			v[i]--
		} else {
			v[i]++
		}
	}
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	if norm > 0 {
		inv := float32(1 / math.Sqrt(norm))
		for i := range v {
			v[i] *= inv
		}
	}
	return v
}

type embedRequest struct {
	Model      string          `json:"model"`
	Input      json.RawMessage `json:"input"`
	Dimensions int             `json:"dimensions"`
	Format     string          `json:"encoding_format"`
}

type embedding struct {
	Object    string    `json:"object"`
	Index     int       `json:"index"`
	Embedding []float32 `json:"embedding"`
}

// embeddings answers POST /v1/embeddings.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	s.embedRequests.Add(1)
	var req embedRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid JSON: "+err.Error())
		return
	}
	inputs, ok := embedInputs(req.Input)
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid_request_error", `"input" must be a non-empty string or a list of strings`)
		return
	}
	if req.Format != "" && req.Format != "float" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", `only encoding_format "float" is scripted`)
		return
	}
	dims := s.script.EmbeddingDimensions
	if dims <= 0 {
		dims = DefaultEmbeddingDimensions
	}
	if req.Dimensions != 0 {
		if req.Dimensions < 1 || req.Dimensions > MaxEmbeddingDimensions {
			writeError(w, http.StatusBadRequest, "invalid_request_error", `"dimensions" must be 1 to 8192`)
			return
		}
		dims = req.Dimensions
	}
	out := make([]embedding, len(inputs))
	tokens := 0
	for i, in := range inputs {
		out[i] = embedding{Object: "embedding", Index: i, Embedding: HashEmbed(in, dims)}
		tokens += words(in)
	}
	model := req.Model
	if model == "" {
		model = s.modelName("")
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": out, "model": model,
		"usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens},
	})
}

// embedInputs reads "input": a string or a list of strings, not empty.
func embedInputs(raw json.RawMessage) ([]string, bool) {
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []string{one}, one != ""
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil || len(many) == 0 {
		return nil, false
	}
	return many, true
}

// EmbeddingRequests returns how many embeddings requests the server
// received.
func (s *Server) EmbeddingRequests() int64 { return s.embedRequests.Load() }
