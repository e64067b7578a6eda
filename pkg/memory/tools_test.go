package memory

import (
	"errors"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/tools"
)

// The gate checks the memory tools' arguments with this package's
// parsers: each spec of pkg/tools carries its parser's check.
func TestToolsCheckedByTheParsers(t *testing.T) {
	// Each passes the tool's JSON Schema and fails its parser.
	for name, args := range map[string]string{
		ToolStateGet:    `{"key":"a..b"}`,
		ToolStateSet:    `{"key":"a b","value":1}`,
		ToolStateDelete: `{"key":".a"}`,
		ToolRemember:    `{"text":""}`,
		ToolRecall:      `{"query":""}`,
	} {
		tool, ok := tools.Lookup(name)
		if !ok || tool.Validator == nil {
			t.Fatalf("%s: no spec or no validator", name)
		}
		if err := tool.Check(args); !errors.Is(err, tools.ErrInvalidArguments) {
			t.Errorf("%s(%s) = %v, want the parser's refusal", name, args, err)
		}
		if err := tools.Validate(tool.Parameters, []byte(args)); err != nil {
			t.Errorf("%s(%s): the schema refuses it already (%v): pick arguments only the parser refuses", name, args, err)
		}
	}
}
