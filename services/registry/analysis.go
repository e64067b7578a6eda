package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"unicode"

	"github.com/agentmesh/agentmesh/pkg/agentspec"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	openai "github.com/sashabaranov/go-openai"
)

// Task analysis: a task that names neither an agent nor skills gets its
// required skills from the org's skill catalogue, by the configured model
// (a structured-output call: a JSON-schema response_format naming the
// catalogue's skills) or, when no model is configured or its answer is not
// usable, by a deterministic fallback (TF-IDF cosine similarity of the
// input to each skill's name and description). It runs in the registry,
// which matches: the analysis is one step of a match, bounded by
// AnalysisConfig.Timeout so that a submit never waits on a slow model.
//
// The model is the operator's choice for small work (AGENTMESH_ANALYSIS_
// MODEL, a cheaper one than the agents'); with none configured no model
// is asked, and every analysis says so (model_skipped). A call that fails
// or answers unusably is logged as a warning and counted
// (agentmesh_task_analysis_failures_total), and the fallback chooses. A
// server that refuses a JSON-schema response_format (older OpenAI-
// compatible servers) is asked again with a JSON-object one, then with
// none (the prompt asks for the JSON), once per server, with a warning.

// Analysis methods recorded in agentmeshv1.TaskAnalysis.method.
const (
	AnalysisModel    = "model"
	AnalysisFallback = "fallback"
)

// Analysis bounds.
const (
	// MaxAnalysisSkills is the most skills an analysis chooses.
	MaxAnalysisSkills = 3
	// maxAnalysisOutput is the most model output the parser reads.
	maxAnalysisOutput = 64 << 10
	// maxAnalysisInput is the most task input sent to the model / scored.
	maxAnalysisInput = 8 << 10
	// minFallbackScore is the least similarity the fallback accepts.
	minFallbackScore = 0.1
	// maxCatalogueInPrompt is the most skills described to the model.
	maxCatalogueInPrompt = 500
)

// SkillCatalog lists an org's skills (its own and the shared ones).
type SkillCatalog interface {
	List(ctx context.Context, org string) ([]*agentmeshv1.Skill, error)
}

// ErrUnknownSkills is the model naming skills not in the catalogue.
var ErrUnknownSkills = errors.New("skills not in the catalogue")

// analyzer runs task analyses.
type analyzer struct {
	cfg    AnalysisConfig
	client *openai.Client
	log    *slog.Logger
	// format is the response_format the server takes (formats: the
	// JSON schema, then a JSON object, then none), lowered when refused.
	format atomic.Int32
}

// The response formats, best first.
const (
	formatSchema = iota
	formatObject
	formatNone
)

func newAnalyzer(cfg AnalysisConfig, log *slog.Logger) *analyzer {
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &analyzer{cfg: cfg, log: log}
	if cfg.BaseURL != "" && cfg.Model != "" && !cfg.FallbackOnly {
		oc := openai.DefaultConfig(cfg.APIKey)
		oc.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
		// No redirects: the API key goes to BaseURL only.
		oc.HTTPClient = &http.Client{Timeout: cfg.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("the model endpoint redirected; not followed")
		}}
		a.client = openai.NewClientWithConfig(oc)
	}
	return a
}

// Analyze chooses the skills input needs from catalogue. It never fails:
// a model error is recorded and the fallback chooses; an analysis without
// skills means nothing in the catalogue fits.
func (a *analyzer) Analyze(ctx context.Context, input string, catalogue []*agentmeshv1.Skill) *agentmeshv1.TaskAnalysis {
	if len(input) > maxAnalysisInput {
		input = input[:maxAnalysisInput]
	}
	out := &agentmeshv1.TaskAnalysis{CatalogueSkills: int32(len(catalogue))}
	if len(catalogue) == 0 {
		out.Method = AnalysisFallback
		return out
	}
	switch {
	case a.client != nil:
		out.Model = a.cfg.Model
		skills, err := a.ask(ctx, input, catalogue)
		if err == nil {
			out.Method, out.Skills = AnalysisModel, skills
			return out
		}
		out.ModelError = err.Error()
		reason := "answer"
		if errors.Is(err, errAnalysisCall) {
			reason = "call"
		}
		metrics.TaskAnalysisFailures.WithLabelValues(reason).Inc()
		a.log.Warn("task analysis: the model's answer was not used; the fallback chooses", "model", a.cfg.Model, "err", err)
	case a.cfg.FallbackOnly:
		out.ModelSkipped = "AGENTMESH_ANALYSIS=fallback: no model is asked"
	default:
		out.ModelSkipped = a.cfg.Skipped
	}
	out.Method = AnalysisFallback
	out.Scores = Similarity(input, catalogue)
	for _, sc := range out.Scores {
		if len(out.Skills) == MaxAnalysisSkills || sc.Score < minFallbackScore || sc.Score < 0.8*out.Scores[0].Score {
			break
		}
		out.Skills = append(out.Skills, sc.Skill)
	}
	if len(out.Scores) > 5 {
		out.Scores = out.Scores[:5]
	}
	return out
}

// analysisSchema is the response_format of the model call.
func analysisSchema(names []string) json.RawMessage {
	schema := map[string]any{
		"type":                 "object",
		"additionalProperties": false,
		"required":             []string{"skills"},
		"properties": map[string]any{
			"skills": map[string]any{
				"type": "array", "maxItems": MaxAnalysisSkills,
				"items": map[string]any{"type": "string", "enum": names},
			},
		},
	}
	b, _ := json.Marshal(schema)
	return b
}

func (a *analyzer) ask(ctx context.Context, input string, catalogue []*agentmeshv1.Skill) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	known := make(map[string]bool, len(catalogue))
	names := make([]string, 0, len(catalogue))
	var list strings.Builder
	for i, sk := range catalogue {
		known[sk.Name] = true
		names = append(names, sk.Name)
		if i < maxCatalogueInPrompt {
			fmt.Fprintf(&list, "- %s: %s\n", sk.Name, oneLine(sk.Description, 200))
		}
	}
	req := openai.ChatCompletionRequest{
		Model: a.cfg.Model,
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: "You route tasks to agents. Choose the skills (at most " +
				fmt.Sprint(MaxAnalysisSkills) + ") from this catalogue that the user's task needs, and answer with JSON {\"skills\": [names]}; an empty list when none fits.\n" + list.String()},
			{Role: openai.ChatMessageRoleUser, Content: input},
		},
		Temperature: 0,
	}
	resp, err := a.create(ctx, req, names)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", errAnalysisCall, oneLine(err.Error(), 300))
	}
	if len(resp.Choices) == 0 {
		return nil, errors.New("model answered no choices")
	}
	return ParseAnalysis(resp.Choices[0].Message.Content, known)
}

// errAnalysisCall wraps a failed model call (not a bad answer).
var errAnalysisCall = errors.New("model call")

// create makes the call with the best response_format the server takes:
// a server that refuses one (400/422 naming response_format or
// json_schema) is asked again at once with the next, and remembered.
func (a *analyzer) create(ctx context.Context, req openai.ChatCompletionRequest, names []string) (openai.ChatCompletionResponse, error) {
	for {
		f := a.format.Load()
		switch f {
		case formatSchema:
			req.ResponseFormat = &openai.ChatCompletionResponseFormat{
				Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
				JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{
					Name: "task_analysis", Strict: true, Schema: analysisSchema(names),
				},
			}
		case formatObject:
			req.ResponseFormat = &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}
		default:
			req.ResponseFormat = nil
		}
		resp, err := a.client.CreateChatCompletion(ctx, req)
		if f == formatNone || !formatRefused(err) {
			return resp, err
		}
		if a.format.CompareAndSwap(f, f+1) {
			metrics.ModelQuirks.WithLabelValues("json_schema_unsupported").Inc()
			a.log.Warn("task analysis: the model server refused the response_format; asking without it from now on (the prompt asks for JSON)",
				"model", a.cfg.Model, "refused", []string{"json_schema", "json_object"}[f], "err", oneLine(err.Error(), 200))
		}
	}
}

// formatRefused reports whether err is a server refusing the request's
// response_format.
func formatRefused(err error) bool {
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	status, msg := 0, ""
	switch {
	case errors.As(err, &apiErr):
		status, msg = apiErr.HTTPStatusCode, apiErr.Message
	case errors.As(err, &reqErr):
		status, msg = reqErr.HTTPStatusCode, string(reqErr.Body)
	}
	msg = strings.ToLower(msg)
	return (status == http.StatusBadRequest || status == http.StatusUnprocessableEntity) &&
		(strings.Contains(msg, "response_format") || strings.Contains(msg, "json_schema"))
}

// ParseAnalysis reads the model's answer: a JSON object {"skills": [...]}
// (optionally in a ``` fence), at most MaxAnalysisSkills names, each in
// known after normalising. Anything else is an error (the fallback then
// chooses); so is an empty list.
func ParseAnalysis(content string, known map[string]bool) ([]string, error) {
	if len(content) > maxAnalysisOutput {
		return nil, fmt.Errorf("model answer of %d bytes is over %d", len(content), maxAnalysisOutput)
	}
	s := strings.TrimSpace(content)
	if strings.HasPrefix(s, "```") {
		s = strings.TrimPrefix(s, "```")
		s = strings.TrimPrefix(s, "json")
		s = strings.TrimSuffix(strings.TrimSpace(s), "```")
	}
	var ans struct {
		Skills []json.RawMessage `json:"skills"`
	}
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(&ans); err != nil {
		return nil, fmt.Errorf("model answer is not the JSON object asked for: %s", oneLine(err.Error(), 200))
	}
	if dec.More() {
		return nil, errors.New("model answer has text after the JSON object")
	}
	if len(ans.Skills) == 0 {
		return nil, errors.New("model chose no skill")
	}
	if len(ans.Skills) > MaxAnalysisSkills {
		return nil, fmt.Errorf("model chose %d skills, over %d", len(ans.Skills), MaxAnalysisSkills)
	}
	raw := make([]string, 0, len(ans.Skills))
	for i, r := range ans.Skills {
		var name string
		if err := json.Unmarshal(r, &name); err != nil {
			return nil, fmt.Errorf("model answer: skills[%d] is not a string", i)
		}
		raw = append(raw, name)
	}
	var skills []string
	var unknown []string
	for _, sk := range agentspec.NormalizeSkills(raw) {
		if slices.Contains(skills, sk) {
			continue
		}
		skills = append(skills, sk)
		if !known[sk] {
			unknown = append(unknown, fmt.Sprintf("%q", oneLine(sk, 64)))
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("model answer: %w: %s", ErrUnknownSkills, strings.Join(unknown, ", "))
	}
	if len(skills) == 0 {
		return nil, errors.New("model chose no skill")
	}
	return skills, nil
}

// Similarity scores every skill of catalogue against input: the cosine of
// their TF-IDF vectors (the skill's document is its name, with "-_.:/" as
// spaces, and its description; IDF over the catalogue). Words are
// lower-cased, stop words dropped, and cut to their first 6 letters (a
// crude stem: "translate" and "translation" meet). Best first, ties by
// name; skills scoring 0 are left out.
func Similarity(input string, catalogue []*agentmeshv1.Skill) []*agentmeshv1.SkillScore {
	docs := make([]map[string]float64, len(catalogue))
	df := map[string]int{}
	for i, sk := range catalogue {
		docs[i] = termFreq(strings.Map(func(r rune) rune {
			if strings.ContainsRune("-_.:/", r) {
				return ' '
			}
			return r
		}, sk.Name) + " " + sk.Description)
		for t := range docs[i] {
			df[t]++
		}
	}
	n := float64(len(catalogue))
	idf := func(t string) float64 { return math.Log(1 + n/float64(max(df[t], 1))) }
	q := termFreq(input)
	qv := map[string]float64{}
	var qn float64
	for t, f := range q {
		if df[t] == 0 {
			continue // a word no skill has adds nothing to any dot product
		}
		qv[t] = f * idf(t)
		qn += qv[t] * qv[t]
	}
	var out []*agentmeshv1.SkillScore
	if qn == 0 {
		return out
	}
	for i, sk := range catalogue {
		var dot, dn float64
		for t, f := range docs[i] {
			w := f * idf(t)
			dn += w * w
			dot += w * qv[t]
		}
		if dot <= 0 || dn == 0 {
			continue
		}
		score := dot / (math.Sqrt(qn) * math.Sqrt(dn))
		out = append(out, &agentmeshv1.SkillScore{Skill: sk.Name, Score: math.Round(score*1e6) / 1e6})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		return out[i].Skill < out[j].Skill
	})
	return out
}

var stopWords = map[string]bool{
	"a": true, "an": true, "and": true, "are": true, "as": true, "at": true, "be": true, "by": true, "do": true,
	"for": true, "from": true, "how": true, "i": true, "in": true, "into": true, "is": true, "it": true, "me": true,
	"my": true, "of": true, "on": true, "or": true, "please": true, "that": true, "the": true, "this": true, "to": true,
	"what": true, "with": true, "you": true, "your": true, "can": true, "will": true, "we": true, "our": true, "all": true,
}

// termFreq is the words of s (see Similarity) with their counts.
func termFreq(s string) map[string]float64 {
	out := map[string]float64{}
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if stopWords[w] || len(w) < 2 {
			continue
		}
		if r := []rune(w); len(r) > 6 {
			w = string(r[:6])
		}
		out[w]++
	}
	return out
}

// oneLine shortens s to n bytes on one line.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}
