// Delegate work to agentmesh from the official TypeScript MCP SDK client
// (@modelcontextprotocol/sdk), over streamable HTTP, and follow it with the
// io.modelcontextprotocol/tasks extension (its wire shapes checked by the
// extension's own schemas, @modelcontextprotocol/ext-tasks).
//
//   AGENTMESH_MCP_URL=http://127.0.0.1:7480/mcp AGENTMESH_API_KEY=... node client.mjs "summarise this"
//
// What it does, printing one JSON line per step ({"step": ...}):
//   1. tools: lists the tools;
//   2. delegate: delegates the task (argv[2], or AGENTMESH_TASK), polls
//      check_status until it ends, and reads get_result;
//   3. cancel (with AGENTMESH_CANCEL_TASK): delegates that task and cancels it;
//   4. tasks extension (with AGENTMESH_APPROVAL_AGENT, an agent whose tool
//      calls need a person's approval, and AGENTMESH_APPROVER_KEY, a key of
//      the approver role): delegate answered with a task handle, tasks/get
//      until input_required, the approval answered with tasks/update (by the
//      approver), tasks/get until completed.
// Other environment: AGENTMESH_AGENT (run on this agent).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateTaskResultV2Schema,
  DetailedTaskV2Schema,
  withTaskCapabilityV2,
} from "@modelcontextprotocol/ext-tasks/core/v2";
import { z } from "zod";

const url = process.env.AGENTMESH_MCP_URL || "http://127.0.0.1:7480/mcp";
const key = process.env.AGENTMESH_API_KEY || "";
const agent = process.env.AGENTMESH_AGENT || undefined;
const taskText = process.argv[2] || process.env.AGENTMESH_TASK || "hello from the MCP example";

const say = (step, data) => console.log(JSON.stringify({ step, ...data }));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// connect opens an MCP session with an API key (Authorization: Bearer).
async function connect(apiKey) {
  const client = new Client({ name: "agentmesh-mcp-example", version: "0.1.0" });
  const headers = apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

async function callTool(client, name, args) {
  const res = await client.callTool({ name, arguments: args });
  if (res.isError) throw new Error(`${name}: ${res.content.map((c) => c.text).join(" ")}`);
  return res.structuredContent;
}

// A result of the extension's methods: any JSON object (checked after).
const anyResult = z.object({}).passthrough();

// ext sends a request of the tasks extension, declaring it per request.
async function ext(client, method, params) {
  return client.request({ method, params: withTaskCapabilityV2(params) }, anyResult);
}

async function pollTask(client, taskId, want) {
  for (;;) {
    const task = DetailedTaskV2Schema.parse(await ext(client, "tasks/get", { taskId }));
    if (task.status === want) return task;
    if (["completed", "failed", "cancelled"].includes(task.status)) {
      throw new Error(`task ${taskId} ended ${task.status}, want ${want}: ${task.statusMessage ?? ""}`);
    }
    await sleep(task.pollIntervalMs ?? 1000);
  }
}

async function main() {
  const client = await connect(key);
  const { tools } = await client.listTools();
  say("tools", { names: tools.map((t) => t.name).sort() });

  // Delegate, poll, read the answer.
  let view = await callTool(client, "delegate", { task: taskText, ...(agent && { agent }) });
  say("delegated", { task_id: view.task_id, status: view.status });
  while (!view.finished) {
    await sleep(200);
    view = await callTool(client, "check_status", { task_id: view.task_id });
  }
  const result = await callTool(client, "get_result", { task_id: view.task_id });
  say("result", { task_id: result.task_id, status: result.status, result: result.result ?? result.error });

  if (process.env.AGENTMESH_CANCEL_TASK) {
    const slow = await callTool(client, "delegate", { task: process.env.AGENTMESH_CANCEL_TASK, ...(agent && { agent }) });
    const cancelled = await callTool(client, "cancel_task", { task_id: slow.task_id, reason: "cancelled by the MCP example" });
    say("cancelled", { task_id: cancelled.task_id, status: cancelled.status });
  }

  const careful = process.env.AGENTMESH_APPROVAL_AGENT;
  const approverKey = process.env.AGENTMESH_APPROVER_KEY;
  if (careful && approverKey) {
    const created = CreateTaskResultV2Schema.parse(
      await ext(client, "tools/call", { name: "delegate", arguments: { task: taskText, agent: careful } }),
    );
    say("task-created", { task_id: created.taskId, status: created.status, resultType: created.resultType });
    const waiting = await pollTask(client, created.taskId, "input_required");
    const [inputKey, request] = Object.entries(waiting.inputRequests)[0];
    const approval = request.params._meta?.["io.agentmesh/approval"];
    say("input-required", { task_id: created.taskId, input: inputKey, method: request.method, tool: approval?.tool, arguments: approval?.arguments });
    const approver = await connect(approverKey);
    await ext(approver, "tasks/update", {
      taskId: created.taskId,
      inputResponses: { [inputKey]: { action: "accept", content: { decision: "approve", comment: "approved by the MCP example" } } },
    });
    const done = await pollTask(client, created.taskId, "completed");
    say("task-completed", { task_id: created.taskId, isError: done.result.isError ?? false, result: done.result.content.map((c) => c.text).join("") });
    await approver.close();
  }
  await client.close();
}

main().catch((err) => {
  console.error(err?.stack || String(err));
  process.exit(1);
});
