package registry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	dto "github.com/prometheus/client_model/go"
)

func catalogue() []*agentmeshv1.Skill {
	return []*agentmeshv1.Skill{
		{Name: "translation", Description: "Translate text between languages, e.g. English into French or German."},
		{Name: "sql", Description: "Write and explain SQL queries against relational databases."},
		{Name: "summarize", Description: "Summarise long documents into short briefs."},
		{Name: "web-search", Description: "Search the web and report what pages say."},
	}
}

func scripted(t *testing.T, script string) string {
	t.Helper()
	sc, err := scriptedmodel.ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	srv := scriptedmodel.New(sc)
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return url
}

// The fallback maps an input to the skill whose description it is most
// like, deterministically; with nothing alike it chooses nothing.
func TestAnalysisFallback(t *testing.T) {
	a := newAnalyzer(AnalysisConfig{Skipped: "no model is configured for task analysis"}, testlog.New(t))
	for _, tt := range []struct{ input, want string }{
		{"translate this into French", "translation"},
		{"Please write a SQL query listing the users", "sql"},
		{"summarise this long report for me", "summarize"},
		{"bake a cake", ""},
	} {
		got := a.Analyze(context.Background(), tt.input, catalogue())
		if got.Method != AnalysisFallback || strings.Join(got.Skills, ",") != tt.want || got.Model != "" || got.CatalogueSkills != 4 ||
			got.ModelSkipped != "no model is configured for task analysis" {
			t.Errorf("Analyze(%q) = %v, want fallback choosing %q", tt.input, got, tt.want)
		}
		if tt.want != "" && (len(got.Scores) == 0 || got.Scores[0].Skill != tt.want || got.Scores[0].Score <= 0) {
			t.Errorf("Analyze(%q) scores = %v", tt.input, got.Scores)
		}
	}
	// Ties go by name.
	tie := []*agentmeshv1.Skill{{Name: "b-thing", Description: "french"}, {Name: "a-thing", Description: "french"}}
	if s := Similarity("french", tie); len(s) != 2 || s[0].Skill != "a-thing" || s[0].Score != s[1].Score {
		t.Errorf("tie = %v, want a-thing first", s)
	}
	if got := a.Analyze(context.Background(), "anything", nil); len(got.Skills) != 0 {
		t.Errorf("empty catalogue chose %v", got.Skills)
	}
}

// With a model: its structured answer chooses; a failure, a timeout, an
// answer naming unknown skills or not JSON falls back, recording why.
func TestAnalysisWithScriptedModel(t *testing.T) {
	url := scripted(t, `{"scenarios": [
		{"format": "task_analysis", "match": "(?i)bonjour", "turns": [{"content": "{\"skills\": [\"translation\", \"Summarize\"]}"}]},
		{"format": "task_analysis", "match": "(?i)unknown", "turns": [{"content": "{\"skills\": [\"juggling\"]}"}]},
		{"format": "task_analysis", "match": "(?i)garbage", "turns": [{"content": "I think translation"}]},
		{"format": "task_analysis", "match": "(?i)broken", "turns": [{"status": 500}]},
		{"format": "task_analysis", "match": "(?i)slow", "turns": [{"delay_ms": 5000, "content": "{\"skills\": [\"sql\"]}"}]},
		{"turns": [{"content": "not an analysis: no format asked"}]}
	]}`)
	a := newAnalyzer(AnalysisConfig{BaseURL: url, Model: "scripted", Timeout: 300 * time.Millisecond}, testlog.New(t))
	got := a.Analyze(context.Background(), "bonjour: say it in German", catalogue())
	if got.Method != AnalysisModel || strings.Join(got.Skills, ",") != "translation,summarize" || got.Model != "scripted" || got.ModelError != "" {
		t.Errorf("model analysis = %v", got)
	}
	failures := func() float64 {
		var m dto.Metric
		_ = metrics.TaskAnalysisFailures.WithLabelValues("call").Write(&m)
		return m.GetCounter().GetValue()
	}
	before := failures()
	for _, tt := range []struct{ input, why string }{
		{"unknown: translate this into French", "juggling"},
		{"garbage: translate this into French", "not the JSON object"},
		{"broken: translate this into French", "model call"},
		{"slow: translate this into French", "model call"},
	} {
		got := a.Analyze(context.Background(), tt.input, catalogue())
		if got.Method != AnalysisFallback || strings.Join(got.Skills, ",") != "translation" || !strings.Contains(got.ModelError, tt.why) {
			t.Errorf("Analyze(%q) = %v, want the fallback's translation and an error naming %q", tt.input, got, tt.why)
		}
	}
	// The two failed calls (500, timeout) are counted, not swallowed.
	if n := failures() - before; n != 2 {
		t.Errorf("%v failed analysis calls counted, want 2", n)
	}
	// The model's skills are checked against this catalogue.
	if got := a.Analyze(context.Background(), "bonjour", []*agentmeshv1.Skill{{Name: "x"}}); got.Method != AnalysisFallback || !strings.Contains(got.ModelError, `"translation"`) {
		t.Errorf("unknown-to-catalogue answer = %v", got)
	}
}

// A server that refuses a JSON-schema response_format is asked again with
// a JSON object one, then none, and remembered: the analysis still uses
// the model.
func TestAnalysisWithoutJSONSchema(t *testing.T) {
	url := scripted(t, `{"quirks": ["no_json_schema"], "scenarios": [
		{"match": "(?i)bonjour", "turns": [{"content": "{\"skills\": [\"translation\"]}"}]}
	]}`)
	a := newAnalyzer(AnalysisConfig{BaseURL: url, Model: "scripted", Timeout: 2 * time.Second}, testlog.New(t))
	for range 2 {
		got := a.Analyze(context.Background(), "bonjour, translate this", catalogue())
		if got.Method != AnalysisModel || strings.Join(got.Skills, ",") != "translation" {
			t.Fatalf("analysis = %v", got)
		}
	}
	if f := a.format.Load(); f != formatObject {
		t.Errorf("format remembered %d, want the JSON object one", f)
	}
}

func TestParseAnalysis(t *testing.T) {
	known := map[string]bool{"sql": true, "translation": true}
	for _, tt := range []struct {
		in, want, err string
	}{
		{`{"skills": ["sql"]}`, "sql", ""},
		{"```json\n{\"skills\": [\" SQL \", \"translation\", \"sql\"]}\n```", "sql,translation", ""},
		{`{"skills": []}`, "", "no skill"},
		{`{"skills": ["sql", "x"]}`, "", `"x"`},
		{`{"skills": [1]}`, "", "skills[0]"},
		{`{"skills": ["sql"]} trailing`, "", "after the JSON"},
		{`["sql"]`, "", "not the JSON object"},
		{`{"skills": ["sql","sql","sql","sql"]}`, "", "over 3"},
		{``, "", "not the JSON object"},
	} {
		got, err := ParseAnalysis(tt.in, known)
		if tt.err == "" && (err != nil || strings.Join(got, ",") != tt.want) {
			t.Errorf("ParseAnalysis(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
		}
		if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("ParseAnalysis(%q) error = %v, want one naming %s", tt.in, err, tt.err)
		}
	}
	if _, err := ParseAnalysis(`{"skills": ["nope"]}`, known); !errors.Is(err, ErrUnknownSkills) {
		t.Errorf("unknown skill error = %v", err)
	}
}

// The parser of model output never panics, and what it accepts is known,
// distinct and at most MaxAnalysisSkills.
func FuzzParseAnalysis(f *testing.F) {
	for _, s := range []string{`{"skills": ["sql"]}`, "```json\n{\"skills\":[\"translation\"]}\n```", `{"skills": [1, null]}`, `{`, `{"skills": "sql"}`} {
		f.Add(s)
	}
	known := map[string]bool{"sql": true, "translation": true, "summarize": true}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseAnalysis(in, known)
		if err != nil {
			return
		}
		if len(got) == 0 || len(got) > MaxAnalysisSkills {
			t.Fatalf("accepted %v", got)
		}
		seen := map[string]bool{}
		for _, s := range got {
			if !known[s] || seen[s] {
				t.Fatalf("accepted %v", got)
			}
			seen[s] = true
		}
	})
}
