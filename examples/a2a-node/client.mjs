// Talk to agentmesh over the Agent2Agent protocol with the official A2A
// JavaScript SDK (@a2a-js/sdk). agentmesh serves A2A 0.3 (JSON-RPC); the
// SDK's 1.x client speaks it through its v0.3 compatibility layer.
//
//   AGENTMESH_URL=http://127.0.0.1:7480 AGENTMESH_API_KEY=... node client.mjs "summarise this"
//
// What it does, printing one JSON line per step ({"step": ...}):
//   1. card: fetches the agent card (with the key: the org's agents);
//   2. send: sends the message (argv[2], or AGENTMESH_TASK) and waits for
//      the answer (blocking message/send);
//   3. stream: sends it again and streams the task to its answer;
//   4. cancel (with AGENTMESH_CANCEL_TASK): sends that message without
//      waiting, then cancels the task.
// Other environment: AGENTMESH_AGENT (run on this agent: request metadata
// {"agent": NAME}).
import {
  ClientFactory,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  createAuthenticatingFetchWithRetry,
} from "@a2a-js/sdk/client";
import { randomUUID } from "node:crypto";

const base = process.env.AGENTMESH_URL || "http://127.0.0.1:7480";
const key = process.env.AGENTMESH_API_KEY || "";
const agent = process.env.AGENTMESH_AGENT;
const text = process.argv[2] || process.env.AGENTMESH_TASK || "hello from the A2A example";

const say = (step, data) => console.log(JSON.stringify({ step, ...data }));

// Every request carries the API key.
const authFetch = createAuthenticatingFetchWithRetry(fetch, {
  headers: async () => (key ? { Authorization: `Bearer ${key}` } : {}),
  shouldRetryWithHeaders: async () => undefined,
});
const legacyCompat = { enabled: true }; // agentmesh speaks A2A 0.3
const factory = new ClientFactory({
  transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch, legacyCompat })],
  cardResolver: new DefaultAgentCardResolver({ fetchImpl: authFetch, legacyCompat }),
});

const STATES = {
  1: "submitted", 2: "working", 3: "completed", 4: "failed", 5: "canceled", 6: "input-required", 7: "rejected", 8: "auth-required",
};
const stateOf = (task) => STATES[task?.status?.state] ?? String(task?.status?.state);
const textOf = (parts = []) => parts.filter((p) => p.content?.$case === "text").map((p) => p.content.value).join("");

function message(words, extra = {}) {
  return {
    messageId: randomUUID(), role: 1 /* user */, contextId: "", taskId: "", extensions: [], referenceTaskIds: [],
    parts: [{ content: { $case: "text", value: words }, metadata: undefined, filename: "", mediaType: "" }],
    metadata: undefined, ...extra,
  };
}

function request(words, { wait = true } = {}) {
  return {
    tenant: "", message: message(words),
    configuration: { acceptedOutputModes: ["text/plain"], taskPushNotificationConfig: undefined, returnImmediately: !wait },
    metadata: agent ? { agent } : undefined,
  };
}

async function main() {
  const client = await factory.createFromUrl(base);
  const card = await new DefaultAgentCardResolver({ fetchImpl: authFetch, legacyCompat }).resolve(base);
  say("card", { name: card.name, skills: (card.skills ?? []).map((s) => s.id) });

  const task = await client.sendMessage(request(text));
  say("send", { task_id: task.id, context_id: task.contextId, state: stateOf(task), answer: textOf(task.artifacts?.[0]?.parts) });

  const events = [];
  let answer = "";
  for await (const ev of client.sendMessageStream(request(text))) {
    const p = ev.payload;
    if (p?.$case === "task") events.push(`task:${stateOf(p.value)}`);
    if (p?.$case === "statusUpdate") events.push(`status:${stateOf(p.value)}`);
    if (p?.$case === "artifactUpdate") {
      events.push("artifact");
      answer = textOf(p.value.artifact?.parts);
    }
  }
  say("stream", { events, answer });

  if (process.env.AGENTMESH_CANCEL_TASK) {
    const started = await client.sendMessage(request(process.env.AGENTMESH_CANCEL_TASK, { wait: false }));
    const cancelled = await client.cancelTask({ tenant: "", id: started.id, metadata: undefined });
    say("cancel", { task_id: cancelled.id, state: stateOf(cancelled) });
  }
}

main().catch((err) => {
  console.error(err?.stack || String(err));
  process.exit(1);
});
