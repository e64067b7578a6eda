#!/usr/bin/env python3
"""A tiny client of agentmesh's REST and SSE door, standard library only.

    python3 agentmesh_rest.py [--url URL] [--key KEY] [--agent A] TEXT
        submits TEXT as a task, follows its events (Server-Sent Events)
        until it ends, resuming with Last-Event-ID if the connection drops,
        and prints the result.
    python3 agentmesh_rest.py --run [--tools T,T] [--max-steps N] TEXT
        the same through the run API (seed 004): POST /v1/runs, then polls
        GET /v1/runs/{id} and prints the steps.

--url defaults to $AGENTMESH_HTTP (else http://127.0.0.1:7480), --key to
$AGENTMESH_API_KEY (none: a dev server without keys). --drop-after N closes
the event stream after N events and resumes it, to show that nothing is
lost or repeated. Exit status: 0 when the task completed, 1 otherwise.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request


class APIError(Exception):
    """An error answer: the HTTP status and the google.rpc.Status body."""

    def __init__(self, http_status, body):
        self.http_status = http_status
        try:
            status = json.loads(body)
        except ValueError:
            status = {"message": body.decode("utf-8", "replace")}
        self.code = status.get("code")
        self.message = status.get("message", "")
        super().__init__("HTTP %d: %s" % (http_status, self.message))


class Client:
    def __init__(self, url, key=None):
        self.url = url.rstrip("/")
        self.key = key

    def _request(self, method, path, body=None, headers=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.key:
            req.add_header("Authorization", "Bearer " + self.key)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        return req

    def call(self, method, path, body=None):
        try:
            with urllib.request.urlopen(self._request(method, path, body), timeout=30) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as e:
            raise APIError(e.code, e.read()) from None

    def events(self, task_id, last_event_id=None, tokens=False):
        """Yields (id, event, data) of a task's event stream until it ends
        (the last is the "end" event; a 204 answer, nothing after the
        cursor of an ended task, yields "end" alone)."""
        path = "/v1/tasks/%s/events%s" % (task_id, "?tokens=true" if tokens else "")
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        try:
            resp = urllib.request.urlopen(self._request("GET", path, headers=headers), timeout=120)
        except urllib.error.HTTPError as e:
            raise APIError(e.code, e.read()) from None
        with resp:
            if resp.status == 204:
                yield None, "end", {}  # nothing after the cursor: it had ended
                return
            ev_id, name, data = None, "message", []
            for raw in resp:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line == "":
                    if data:
                        yield ev_id, name, json.loads("\n".join(data))
                    ev_id, name, data = None, "message", []
                elif line.startswith(":"):
                    continue  # keep-alive
                else:
                    field, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if field == "id":
                        ev_id = int(value)
                    elif field == "event":
                        name = value
                    elif field == "data":
                        data.append(value)


def follow(client, task_id, drop_after=None):
    """Prints a task's events to its end; returns the seqs seen. A stream
    that breaks off is resumed from the last seq seen (Last-Event-ID); with
    drop_after, it is dropped on purpose after that many events."""
    seen, last, tries = [], None, 0
    while True:
        stream = client.events(task_id, last_event_id=last)
        ended, dropped = False, False
        for ev_id, name, data in stream:
            if name == "end":
                ended = True
                break
            if name == "error":
                print("stream error: %s" % data.get("message"), flush=True)
                break
            if ev_id is not None:
                seen.append(ev_id)
                last, tries = ev_id, 0
            ev = data.get("event", {})
            detail = ev.get("status", "") if name == "status" else ev.get("step", {}).get("kind", "")
            print("event %s %s %s" % (ev_id, name, detail), flush=True)
            if drop_after is not None and len(seen) == drop_after:
                dropped = True
                break
        stream.close()
        if ended:
            return seen
        if dropped:
            drop_after = None
        tries += 1
        if tries > 10:
            raise RuntimeError("the event stream keeps breaking off")
        print("resuming with Last-Event-ID: %s" % last, flush=True)
        time.sleep(0.1 * tries)


def submit(client, args):
    body = {"input": " ".join(args.text)}
    if args.agent:
        body["agent"] = args.agent
    task = client.call("POST", "/v1/tasks", body)["task"]
    print("submitted %s to %s" % (task["id"], task["agent"]), flush=True)
    seen = follow(client, task["id"], args.drop_after)
    history = client.call("GET", "/v1/tasks/%s/history" % task["id"])["events"]
    want = [int(e["seq"]) for e in history]
    print("events seen: %s (history: %s)%s" % (seen, want, "" if seen == want else " MISMATCH"), flush=True)
    task = client.call("GET", "/v1/tasks/" + task["id"])["task"]
    print("status: %s" % task["status"])
    print("result: %s" % task.get("result", task.get("error", "")))
    return 0 if task["status"] == "TASK_STATUS_COMPLETED" and seen == want else 1


def run_api(client, args):
    body = {"messages": [{"role": "user", "content": " ".join(args.text)}]}
    if args.agent:
        body["agent"] = args.agent
    if args.tools:
        body["tools"] = args.tools.split(",")
    if args.max_steps:
        body["max_steps"] = args.max_steps
    started = client.call("POST", "/v1/runs", body)
    print("run %s: %s (poll %s)" % (started["session_id"], started["status"], started["poll_url"]), flush=True)
    while True:
        session = client.call("GET", started["poll_url"])
        if session["status"] not in ("pending", "running"):
            break
        time.sleep(0.2)
    for step in session.get("steps", []):
        if step.get("thought"):
            print("step %d thought: %s" % (step["index"], step["thought"]))
        if step.get("action"):
            print("step %d action: %s %s" % (step["index"], step["action"]["tool"], json.dumps(step["action"].get("args", {}))))
            print("step %d observation: %s" % (step["index"], step.get("observation", "")))
        if step.get("is_final"):
            print("step %d final answer: %s" % (step["index"], step["final_answer"]))
    print("status: %s" % session["status"])
    return 0 if session["status"] == "completed" else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=os.environ.get("AGENTMESH_HTTP", "http://127.0.0.1:7480"))
    p.add_argument("--key", default=os.environ.get("AGENTMESH_API_KEY"))
    p.add_argument("--agent")
    p.add_argument("--drop-after", type=int)
    p.add_argument("--run", action="store_true", help="use the run API")
    p.add_argument("--tools", help="run API: only these of the agent's tools, comma-separated")
    p.add_argument("--max-steps", type=int)
    p.add_argument("text", nargs="+")
    args = p.parse_args()
    client = Client(args.url, args.key)
    try:
        return run_api(client, args) if args.run else submit(client, args)
    except APIError as e:
        print("agentmesh: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
