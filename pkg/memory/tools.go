package memory

import (
	"encoding/json"

	"github.com/agentmesh/agentmesh/pkg/tools"
)

// The memory tools' specs are pkg/tools'; their arguments are checked by
// the parsers here (clear errors for the model), which the executor's gate
// runs: they are registered with the specs here rather than imported
// there, so that pkg/tools (which the agent child links) links neither
// this package nor the public API.
func init() {
	tools.RegisterValidator(ToolStateGet, func(args json.RawMessage) error { _, err := ParseStateGet(args); return err })
	tools.RegisterValidator(ToolStateSet, func(args json.RawMessage) error { _, err := ParseStateSet(args); return err })
	tools.RegisterValidator(ToolStateDelete, func(args json.RawMessage) error { _, err := ParseStateDelete(args); return err })
	tools.RegisterValidator(ToolRemember, func(args json.RawMessage) error { _, err := ParseRemember(args); return err })
	tools.RegisterValidator(ToolRecall, func(args json.RawMessage) error { _, err := ParseRecall(args); return err })
}
