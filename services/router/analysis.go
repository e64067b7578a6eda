package router

import (
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// maxAnalysisInput is the most of a task's input the registry's task
// analysis reads.
const maxAnalysisInput = 8 << 10

// analysisInput is what the registry analyses of a submit naming neither
// agent nor skills: the start of its input (valid UTF-8); "" otherwise.
func analysisInput(req *agentmeshv1.SubmitTaskRequest) string {
	if req.GetAgent() != "" || len(req.GetRequiredSkills()) > 0 {
		return ""
	}
	in := req.GetInput()
	if len(in) > maxAnalysisInput {
		in = strings.ToValidUTF8(in[:maxAnalysisInput], "")
	}
	return in
}
