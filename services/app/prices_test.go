package app

import (
	"testing"

	"github.com/agentmesh/agentmesh/services/executor/llm"
)

func TestPricesConfig(t *testing.T) {
	s := newSettings("executor")
	if err := s.parse([]string{"--prices", "gpt-4o-mini=0.15/0.60,llama3.1=0/0"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := executorConfigOf(s)
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Model.Prices; len(p) != 2 || p["gpt-4o-mini"] != (llm.Price{PromptPerM: 0.15, CompletionPerM: 0.60}) {
		t.Errorf("prices = %v", p)
	}
	bad := newSettings("executor")
	if err := bad.parse([]string{"--prices", "gpt-4o=cheap"}); err != nil {
		t.Fatal(err)
	}
	if _, err := executorConfigOf(bad); err == nil {
		t.Error("a malformed price table was accepted")
	} else if _, ok := err.(usageError); !ok {
		t.Errorf("err = %T %v, want a usage error", err, err)
	}
	if got := Main([]string{"executor", "--prices", "gpt-4o=1/2/3/4/5"}); got != 2 {
		t.Errorf("exit %d, want 2 (usage)", got)
	}
}
