// Tap one org's agentmesh events with the `nats` package (nats.js).
//
//   amctl taps create acme -f acme.creds        # an org admin's tap credential
//   NATS_URL=nats://127.0.0.1:4222 NATS_CREDS=acme.creds AGENTMESH_ORG=acme node tap.mjs
//
// Every public event is JSON (protojson of agentmesh.v1.TaskEvent or
// agentmesh.bus.v1.AgentEvent, field names as in docs/events.md); the
// Am-Type header names the message type. The credential can only subscribe
// to <prefix>.evt.<org>.> and <prefix>.live.<org>.>: any other subject is
// refused by the server.
//
// Prints one JSON line per event: {"subject", "type", "event"}.
// Environment: NATS_URL (default nats://127.0.0.1:4222), NATS_CREDS (file,
// required), AGENTMESH_ORG (required), AGENTMESH_PREFIX (default am),
// NATS_CA (CA file when the server uses TLS), MAX_EVENTS (stop after n).
import { readFileSync } from "node:fs";
import { connect, credsAuthenticator } from "nats";

const url = process.env.NATS_URL || "nats://127.0.0.1:4222";
const credsFile = process.env.NATS_CREDS;
const org = process.env.AGENTMESH_ORG;
const prefix = process.env.AGENTMESH_PREFIX || "am";
const max = Number(process.env.MAX_EVENTS || 0);
if (!credsFile || !org) {
  console.error("set NATS_CREDS (a tap credential file) and AGENTMESH_ORG");
  process.exit(2);
}

const opts = {
  servers: url,
  authenticator: credsAuthenticator(readFileSync(credsFile)),
  name: `agentmesh-tap-${org}`,
};
if (process.env.NATS_CA) {
  opts.tls = { caFile: process.env.NATS_CA };
}

const nc = await connect(opts);
const decoder = new TextDecoder();
let seen = 0;

async function follow(subject) {
  const sub = nc.subscribe(subject);
  for await (const m of sub) {
    const event = JSON.parse(decoder.decode(m.data)); // public events are JSON
    const type = m.headers ? m.headers.get("Am-Type") : "";
    process.stdout.write(JSON.stringify({ subject: m.subject, type, event }) + "\n");
    if (max > 0 && ++seen >= max) {
      await nc.drain();
    }
  }
}

const done = Promise.all([follow(`${prefix}.evt.${org}.>`), follow(`${prefix}.live.${org}.>`)]);
await nc.flush(); // the server has the subscriptions (and refused none)
console.error(`tapping ${prefix}.evt.${org}.> and ${prefix}.live.${org}.> on ${url}`);

for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => nc.drain());
}
(async () => {
  for await (const s of nc.status()) {
    if (s.type === "error") {
      console.error(`server error: ${s.data}`); // e.g. a permissions violation
    }
  }
})();
await done;
const err = await nc.closed();
if (err) {
  console.error(`closed: ${err.message}`);
  process.exit(1);
}
