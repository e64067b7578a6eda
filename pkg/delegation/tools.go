package delegation

import (
	"encoding/json"

	"github.com/agentmesh/agentmesh/pkg/tools"
)

// The delegation tools' specs are pkg/tools'; their arguments are checked
// by the parsers here (clear errors for the model), which the executor's
// gate runs: they are registered with the specs here rather than
// imported there, so that pkg/tools (which the agent child links) links
// neither this package nor the public API.
func init() {
	tools.RegisterValidator(ToolCallAgent, func(args json.RawMessage) error { _, err := ParseCallAgent(args); return err })
	tools.RegisterValidator(ToolCallModel, func(args json.RawMessage) error { _, err := ParseCallModel(args); return err })
	tools.RegisterValidator(ToolGetTaskStatus, func(args json.RawMessage) error { _, err := ParseGetTaskStatus(args); return err })
	tools.RegisterValidator(ToolWaitTasks, func(args json.RawMessage) error { _, err := ParseWaitTasks(args); return err })
}
