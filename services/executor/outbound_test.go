package executor_test

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// countingListener is a real loopback TCP listener that counts the
// connections it accepts.
func countingListener(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), accepted
}

// On the real path (bus, executor, agent child): an agent whose model
// base_url or MCP url names a loopback service — here a listener standing
// for the NATS or gRPC port — fails with the address refused, and the
// listener never sees a connection. The executor's own model (the
// scripted one, on loopback too) keeps working.
func TestAgentOutboundURLsRefusedBeforeAnyPacket(t *testing.T) {
	e := newEnv(t)
	e.startExecutor()
	addr, accepted := countingListener(t)

	base := withModel(&agentmeshv1.ModelSettings{BaseUrl: "http://" + addr + "/v1"})
	byModel := e.submitTask(&agentmeshv1.Task{Input: "hi", AgentSpec: base})
	mcpAgent := withModel(nil)
	mcpAgent.Name = "mcp-probe"
	mcpAgent.McpServers = []*agentmeshv1.McpServer{{Name: "internal", Url: "http://" + addr + "/mcp"}}
	byMCP := e.submitTask(&agentmeshv1.Task{Input: "hi", AgentSpec: mcpAgent})
	mcpAt := func(name, url string) *agentmeshv1.Task {
		a := withModel(nil)
		a.Name = name
		a.McpServers = []*agentmeshv1.McpServer{{Name: "internal", Url: url}}
		return e.submitTask(&agentmeshv1.Task{Input: "hi", AgentSpec: a})
	}
	mcpMetadata := mcpAt("mcp-metadata", "http://169.254.169.254/mcp")
	mcpPrivate := mcpAt("mcp-private", "http://192.168.0.10:8080/mcp")
	mcpV6 := mcpAt("mcp-v6", "http://[::1]:"+addr[strings.LastIndex(addr, ":")+1:]+"/mcp")
	metadata := e.submitTask(&agentmeshv1.Task{Input: "hi", AgentSpec: withModel(&agentmeshv1.ModelSettings{BaseUrl: "http://169.254.169.254/v1"})})
	private := e.submitTask(&agentmeshv1.Task{Input: "hi", AgentSpec: withModel(&agentmeshv1.ModelSettings{BaseUrl: "http://10.0.0.7:11434/v1"})})

	for name, task := range map[string]*agentmeshv1.Task{
		"base_url": byModel, "metadata": metadata, "private": private,
		"mcp url": byMCP, "mcp metadata": mcpMetadata, "mcp private": mcpPrivate, "mcp ::1": mcpV6,
	} {
		got := e.waitStatus(task.Id, taskstate.Failed, 30*time.Second)
		if !strings.Contains(got.Error, "address not allowed") {
			t.Errorf("%s: error = %q, want the address refused", name, got.Error)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the loopback service accepted %d connections from the executor", n)
	}
	ok := e.submit("hi")
	e.waitStatus(ok.Id, taskstate.Completed, 30*time.Second)
}
