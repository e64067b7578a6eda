package router

import (
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
)

// An escaped "/" in an id stays in the id: POST /v1/tasks/ID%2Fcancel is
// a POST of /v1/tasks/{id} (405), never a cancel of task ID, and GET of it
// a malformed id; HEAD is served where GET is.
func TestHTTPEscapedPath(t *testing.T) {
	e, c := startHTTP(t, Config{})
	task := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Input: "x", Agent: "helper"})
	r := c.As("k-op").Do(t, "POST", "/v1/tasks/"+task.Id+"%2Fcancel", `{}`)
	wantStatus(t, r, 405, codes.Unimplemented, "POST /v1/tasks/"+task.Id+"%2Fcancel: method not allowed", "")
	if r.Header.Get("Allow") != "DELETE, GET, HEAD, OPTIONS, PATCH" {
		t.Errorf("Allow %q, want the methods of /v1/tasks/{id}", r.Header.Get("Allow"))
	}
	r = c.Do(t, "GET", "/v1/tasks/"+task.Id+"%2Fcancel", nil)
	wantStatus(t, r, 400, codes.InvalidArgument, "malformed task id", "id")
	var got agentmeshv1.GetTaskResponse
	c.Do(t, "GET", "/v1/tasks/"+task.Id, nil).Decode(t, &got)
	if got.GetTask().GetStatus() == taskstate.Cancelled {
		t.Fatal("the escaped path cancelled the task")
	}
	if r := c.Do(t, "HEAD", "/v1/tasks/"+task.Id, nil); r.Code != 200 || len(r.Body) != 0 {
		t.Errorf("HEAD: HTTP %d %q, want 200 without a body", r.Code, r.Body)
	}
}
