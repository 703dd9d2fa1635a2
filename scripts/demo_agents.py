"""Scripted demo agents: a loopback server that answers Sagan's Anthropic Messages API calls
with a fixed script per agent, so `make demo` shows a whole experiment — questions, plan,
pods, analysis, clean result — without an API key.

It is clearly a demo: runs record the model `demo-scripted`, and Sagan shows a banner while
it is in use. `make demo` never starts it when a real ANTHROPIC_API_KEY is configured.

The script reads only what the agent is sent (its system prompt, the brief, tool results),
the same way a model would, so the product code paths are the real ones.
"""
from __future__ import annotations

import base64
import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "demo-scripted"
_ids = itertools.count(1)

# A tiny real experiment for two local pods: each posts progress, writes a metrics JSON and an
# SVG chart into $SAGAN_ARTIFACT_DIR, and exits 0.
_POD_SCRIPT = (
    "import json, os, time, urllib.request\n"
    "d = os.environ['SAGAN_ARTIFACT_DIR']; os.makedirs(d, exist_ok=True)\n"
    "seed = int(os.environ.get('SAGAN_RUN_INDEX', '0'))\n"
    "for step in range(1, 9):\n"
    "    body = {'progressPct': 10 + step * 10, 'message': f'seed {seed}: epoch {step}/8', 'seq': 100 + step,\n"
    "            'metrics': {'loss': round(1 / (step + seed + 1), 3)}}\n"
    "    req = urllib.request.Request(os.environ['SAGAN_PROGRESS_URL'], data=json.dumps(body).encode(),\n"
    "        headers={'Authorization': 'Bearer ' + os.environ['SAGAN_POD_PROGRESS_TOKEN'],\n"
    "                 'Content-Type': 'application/json'})\n"
    "    urllib.request.urlopen(req, timeout=10); time.sleep(2)\n"
    "acc = 0.90 + seed * 0.02\n"
    "json.dump({'seed': seed, 'accuracy': acc}, open(os.path.join(d, f'metrics-{seed}.json'), 'w'))\n"
    "open(os.path.join(d, f'accuracy-{seed}.svg'), 'w').write(\n"
    "    '<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 100 20\"><rect x=\"0\" y=\"5\" '\n"
    "    f'width=\"{acc * 100:.0f}\" height=\"10\"><title>seed {seed}: accuracy {acc:.2f}</title></rect></svg>')\n"
)
DOCKER_ARGS = ("python3 -c 'import base64; exec(base64.b64decode(\"%s\"))'"
               % base64.b64encode(_POD_SCRIPT.encode()).decode())


def demo_plan() -> str:
    spec = [{"name": f"demo-seed-{i}", "gpuType": "RTX4090", "gpuCount": 1, "containerDiskGb": 1,
             "estimatedMinutes": 2, "keepAliveMinutes": 0, "dockerArgs": DOCKER_ARGS,
             "config": {"command": f"seed {i} of the probe", "artifacts": [
                 f"/workspace/sagan-artifacts/metrics-{i}.json", f"/workspace/sagan-artifacts/accuracy-{i}.svg"]}}
            for i in range(2)]
    return f"""The owner answered my questions; here is the plan (demo).

## Goal
Measure how much the probe's accuracy moves between two seeds.

## Hypothesis
The two seeds land within two points of accuracy of each other.

## Prediction
Accuracy of 0.90–0.94 on both seeds.

## Kill Criterion
Stop if a seed fails to finish.

## Experimental Setup
Two local pods, one seed each, eight epochs.

## Compute and Hardware
Two local pods for about two minutes (no GPU cost in the demo).

## Artifacts
A metrics JSON and an SVG chart per pod.

## Verification
Both metrics files exist.

## Risks and Red Team
Two seeds say little about variance.
### Critique loop notes
One critique round; passed.

## Likely Clean Result
A bar per seed with its accuracy.

## Approval Checklist
- [x] The goal matches the record
- [ ] Two seeds are enough for a demo

[TEXTBOX:anything-else]

```runpod-spec
{json.dumps(spec, indent=1)}
```
"""


CLEAN_RESULT = """<section id="tldr"><h2>TL;DR</h2><ul>
<li><strong>Motivation:</strong> I wanted to know how much the probe moves between seeds.</li>
<li><strong>What I ran:</strong> two seeds of the probe on two local pods.</li>
<li><strong>Results:</strong> both seeds land within two points (<a href="#figure">figure</a>).</li>
<li><strong>Next steps:</strong> run ten seeds before trusting a single number.</li></ul></section>
<figure id="figure"><svg viewBox="0 0 120 40" role="img"><rect x="10" y="10" width="90" height="8">
<title>seed 0: accuracy 0.90</title></rect><rect x="10" y="24" width="92" height="8">
<title>seed 1: accuracy 0.92</title></rect></svg><figcaption>Accuracy by seed</figcaption></figure>
<details><summary>Experimental design</summary><p>Two seeds, eight epochs each, on local pods.
This is Sagan's scripted demo; the numbers are illustrative.</p></details>"""


def reply(*blocks, stop_reason=None) -> dict:
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {"id": f"msg_demo_{next(_ids):05d}", "type": "message", "role": "assistant", "model": MODEL,
            "content": list(blocks), "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": 200, "output_tokens": 60}}


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def tool(name: str, data: dict) -> dict:
    return {"type": "tool_use", "id": f"toolu_demo_{next(_ids):05d}", "name": name, "input": data}


def _turns(messages) -> int:
    """Tool-calling turns the agent has taken so far in this conversation."""
    return sum(1 for m in messages if m["role"] == "assistant" and isinstance(m["content"], list)
               and any(b.get("type") == "tool_use" for b in m["content"]))


def _brief(messages) -> str:
    first = messages[0]["content"] if messages else ""
    return first if isinstance(first, str) else json.dumps(first)


def respond(body: dict) -> dict:
    """What the scripted agent answers to one Messages API call."""
    system = body.get("system") or ""
    messages = body.get("messages") or []
    turn = _turns(messages)
    brief = _brief(messages)
    if "experiment planner" in system:
        if "epm:clarify-answers" not in brief:
            script = [reply(tool("ask_questions", {"questions": [
                {"key": "seeds", "text": "How many seeds should the demo run?"},
                {"key": "metric", "text": "Which metric matters most?"}]}))]
        else:
            script = [reply(tool("submit_plan", {"markdown": demo_plan()}))]
        return script[turn] if turn < len(script) else reply(text("Done (demo planner)."))
    if "experiment orchestrator" in system:
        script = [
            reply(text("Dispatching the approved spec (demo)."), tool("launch_pods", {})),
            reply(tool("wait_for_pods", {})),
            reply(text("Pods finished; asking the analyzer."),
                  tool("spawn_agent", {"agent": "analyzer", "request": "Interpret the results and write the clean result."})),
            reply(tool("spawn_agent", {"agent": "clean-result-critic", "request": "Review the clean result, round 1."})),
            reply(tool("post_marker", {"marker": "epm:awaiting-promotion", "note": "Clean result ready for the owner.",
                                       "next_status": "awaiting_promotion"})),
        ]
        return script[turn] if turn < len(script) else reply(text("The clean result awaits promotion (demo)."))
    if "analyse the experiment" in system or "analyzer" in system.lower():
        script = [
            reply(tool("post_marker", {"marker": "epm:interpretation",
                                       "note": "Both seeds land within two points; the prediction held."})),
            reply(tool("write_clean_result", {
                "title": "Two seeds of the probe agree within two points (LOW confidence)", "html": CLEAN_RESULT})),
            reply(tool("set_status", {"status": "clean_result_drafting", "note": "Draft written (demo)."})),
        ]
        return script[turn] if turn < len(script) else reply(text("Interpretation and draft done (demo)."))
    if "critic" in system or "You read the clean result" in system or "You check the latest" in system:
        script = [reply(tool("post_marker", {"marker": "epm:clean-result-critique", "review_pair": "clean_result",
                                             "round": 1, "reviewer": "clean-result-critic", "verdict": "pass"}))]
        return script[turn] if turn < len(script) else reply(text("Pass (demo critic)."))
    return reply(text("This demo agent has no script for that request."))


class DemoAgents:
    """The loopback server; `url` is what ANTHROPIC_BASE_URL points at."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                    payload, status = respond(body), 200
                except Exception as exc:  # noqa: BLE001 - answer like the API would, never crash
                    payload, status = {"type": "error", "error": {"type": "api_error", "message": str(exc)}}, 500
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "DemoAgents":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    import time
    agents = DemoAgents(port=0).start()
    print(agents.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        agents.stop()
