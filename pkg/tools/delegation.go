package tools

import "encoding/json"

// CategoryDelegation: tools that start and follow sub-tasks.
const CategoryDelegation Category = "delegation"

// The delegation tools (docs/delegation.md). They run in the executor,
// which creates and reads sub-tasks through the state service; their
// arguments are checked by package delegation's parsers (clear errors for
// the model), which it registers (RegisterValidator).
func init() {
	builtin = append(builtin,
		Tool{Spec: Spec{
			Name: "call_agent",
			Description: "Delegates a sub-task to another agent, named (\"agent\") or chosen by the skills it needs (\"skills\"), and returns at once a subtask://ID URI. " +
				"Optional overrides: \"model\", \"system_prompt\", and \"tools\" (a subset of the agent's tools). Follow it with get_task_status or wait_tasks.",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"agent":{"type":"string","description":"The agent to delegate to."},` +
				`"skills":{"type":"array","items":{"type":"string"},"description":"Skills the agent must offer (instead of agent)."},` +
				`"input":{"type":"string","description":"What the sub-task should do."},` +
				`"title":{"type":"string"},` +
				`"model":{"type":"string","description":"Another model name for the sub-agent."},` +
				`"system_prompt":{"type":"string","description":"Another system prompt for the sub-agent."},` +
				`"tools":{"type":"array","items":{"type":"string"},"description":"Only these of the agent's tools."}},` +
				`"required":["input"],"additionalProperties":false}`),
			Category: CategoryDelegation, Risk: RiskNone, Runs: InExecutor,
		}},
		Tool{Spec: Spec{
			Name: "call_model",
			Description: "Asks a model (often a smaller, cheaper one) in the background, without tools, and returns at once a subtask://ID URI; " +
				"its answer is the sub-task's result (get_task_status, wait_tasks).",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"model":{"type":"string","description":"The model name; omitted, the agent's small model."},` +
				`"input":{"type":"string","description":"The prompt."},` +
				`"system_prompt":{"type":"string"},` +
				`"title":{"type":"string"}},` +
				`"required":["input"],"additionalProperties":false}`),
			Category: CategoryDelegation, Risk: RiskNone, Runs: InExecutor,
		}},
		Tool{Spec: Spec{
			Name:        "get_task_status",
			Description: "Returns the status of a sub-task (a subtask://ID URI): its status, progress (steps), and its result or error once it has ended.",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"task":{"type":"string","description":"The subtask://ID URI."}},` +
				`"required":["task"],"additionalProperties":false}`),
			Category: CategoryDelegation, Risk: RiskNone, Runs: InExecutor,
		}},
		Tool{Spec: Spec{
			Name: "wait_tasks",
			Description: "Waits for sub-tasks (subtask://ID URIs; none = all of this task's sub-tasks) to end — mode \"all\" (default) or \"any\" — " +
				"at most timeout_seconds, and returns each one's status and result or error, in the order asked. While it waits this task holds no executor slot.",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"tasks":{"type":"array","items":{"type":"string"}},` +
				`"mode":{"type":"string","enum":["all","any"]},` +
				`"timeout_seconds":{"type":"integer","minimum":0,"maximum":86400}},` +
				`"additionalProperties":false}`),
			Category: CategoryDelegation, Risk: RiskNone, Runs: InExecutor,
		}},
	)
}
