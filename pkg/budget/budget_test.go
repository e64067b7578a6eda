package budget

import (
	"errors"
	"math"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		b     *agentmeshv1.Budget
		field string // "" = valid
	}{
		{"nil", nil, ""},
		{"empty", &agentmeshv1.Budget{}, ""},
		{"all set", &agentmeshv1.Budget{MaxSteps: 10, MaxTokens: 1000, MaxCostUsd: 0.5, MaxWallTime: durationpb.New(time.Minute)}, ""},
		{"at the maxima", &agentmeshv1.Budget{MaxSteps: MaxSteps, MaxTokens: MaxTokens, MaxCostUsd: MaxCostUSD, MaxWallTime: durationpb.New(MaxWallTime)}, ""},
		{"negative steps", &agentmeshv1.Budget{MaxSteps: -1}, "budget.max_steps"},
		{"absurd steps", &agentmeshv1.Budget{MaxSteps: math.MaxInt32}, "budget.max_steps"},
		{"negative tokens", &agentmeshv1.Budget{MaxTokens: -5}, "budget.max_tokens"},
		{"absurd tokens", &agentmeshv1.Budget{MaxTokens: math.MaxInt64}, "budget.max_tokens"},
		{"NaN cost", &agentmeshv1.Budget{MaxCostUsd: math.NaN()}, "budget.max_cost_usd"},
		{"+Inf cost", &agentmeshv1.Budget{MaxCostUsd: math.Inf(1)}, "budget.max_cost_usd"},
		{"-Inf cost", &agentmeshv1.Budget{MaxCostUsd: math.Inf(-1)}, "budget.max_cost_usd"},
		{"negative cost", &agentmeshv1.Budget{MaxCostUsd: -0.01}, "budget.max_cost_usd"},
		{"absurd cost", &agentmeshv1.Budget{MaxCostUsd: 1e300}, "budget.max_cost_usd"},
		{"negative wall time", &agentmeshv1.Budget{MaxWallTime: durationpb.New(-time.Second)}, "budget.max_wall_time"},
		{"absurd wall time", &agentmeshv1.Budget{MaxWallTime: durationpb.New(MaxWallTime + time.Second)}, "budget.max_wall_time"},
		{"invalid wall time", &agentmeshv1.Budget{MaxWallTime: &durationpb.Duration{Seconds: 1, Nanos: -1}}, "budget.max_wall_time"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate("budget", tc.b)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			var be *bus.Error
			if !errors.As(err, &be) || be.Code != bus.CodeInvalidArgument || be.Field != tc.field {
				t.Fatalf("got %v, want invalid_argument on %s", err, tc.field)
			}
		})
	}
}
