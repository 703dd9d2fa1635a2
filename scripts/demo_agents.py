"""Scripted demo agents: a loopback server that answers Sagan's Anthropic Messages API calls
with a fixed script per agent, so `make demo` shows a whole experiment — questions, plan,
code written and reviewed, pods, analysis, clean result — without an API key.

It is clearly a demo: runs record the model `demo-scripted`, and Sagan shows a banner while
it is in use. `make demo` never starts it when a real ANTHROPIC_API_KEY is configured.

The script reads only what the agent is sent (its system prompt, the brief, tool results),
the same way a model would, so the product code paths are the real ones. Which agent is
asking is told by its system prompt, exactly as the definitions in agents/ have it.

It answers through the test suite's faithful fake of the Messages API
(tests/fakes/anthropic_server.py), so the demo gets what the real API sends: streamed
replies, thinking blocks with signatures that must come back unchanged, narration between
tool calls inside the thinking, prompt-cache usage, and 400s for anything the API refuses.

With `code_stage` on (`make demo` turns it on when services.code.demo_repo could set up its tiny
research repository), the planner reads the probe (`repo_read_file`) and earlier
experiments before it writes the pods' command, the orchestrator drives the code loop
with `code_step`: the implementer fixes the repository's bug, the code reviewer asks for
one targeted fix in round 1, both reviewers pass round 2, Sagan runs the tests in the
sandbox, and the pod-provisioner dispatches two local pods that run that commit. The
analyzer lists the uploads and draws the figure of the clean result with `run_analysis`
from the two pods' metrics. In the second demo experiment (services.pipeline.demo.SHORT_RUN_TITLE)
the pods run a two-epoch probe that crashes at the reviewed commit: the orchestrator reads
the crashed pod's log and sends the traceback back to the implementer
(`send_crash_to_code`), whose fix is reviewed, tested and dispatched again. Without the
code stage the orchestrator dispatches a self-contained script straight away.
"""
from __future__ import annotations

import base64
import json
import re
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from services.code import demo_repo  # noqa: E402
from services.pipeline.demo import SHORT_RUN_TITLE  # noqa: E402
from tests.fakes import anthropic_server  # noqa: E402

MODEL = "demo-scripted"

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


PROBE_COMMAND = "python3 probe.py"
SHORT_RUN_COMMAND = f"python3 probe.py --epochs {demo_repo.SHORT_RUN_EPOCHS}"


def _pod_spec(code_stage: bool, command: str = PROBE_COMMAND) -> list[dict]:
    """Two local pods, one seed each: the repository's probe.py at the reviewed commit, or
    (without the code stage) the self-contained script above."""
    spec = []
    for i in range(2):
        artifacts = [f"/workspace/sagan-artifacts/metrics-{i}.json", f"/workspace/sagan-artifacts/accuracy-{i}.svg"]
        spec.append({"name": f"demo-seed-{i}", "gpuType": "RTX4090", "gpuCount": 1, "containerDiskGb": 1,
                     "estimatedMinutes": 2, "keepAliveMinutes": 0,
                     "dockerArgs": command if code_stage else DOCKER_ARGS,
                     "config": {"command": f"seed {i} of the probe", "artifacts": artifacts}})
    return spec


def demo_plan(code_stage: bool = False, *, short_run: bool = False, probe_source: str | None = None,
              earlier: int | None = None) -> str:
    """The plan, grounded in what the planner read: the probe's argument parser decides the
    command (`--epochs` only when probe.py parses it), and the closest earlier experiment
    is cited."""
    parses_epochs = probe_source is not None and '"--epochs"' in probe_source
    epochs = demo_repo.SHORT_RUN_EPOCHS if short_run and parses_epochs else 8
    command = SHORT_RUN_COMMAND if short_run and parses_epochs else PROBE_COMMAND
    read = ""
    if probe_source is not None:
        read = ("I read probe.py: its argument parser takes `--epochs` (default 8), "
                if parses_epochs else "I read probe.py: it parses no arguments, ")
        read += f"so each pod runs `{command}`. "
    if code_stage:
        code = (f"{read}First fix stats.mean(), which divides by n + 1 (its test fails), and have it reviewed and "
                f"tested; then two local pods run probe.py at that commit, one seed each, {epochs} epochs.")
    else:
        code = "Two local pods, one seed each, eight epochs."
    goal = ("See whether two epochs of the probe already separate the seeds as eight do." if short_run
            else "Measure how much the probe's accuracy moves between two seeds.")
    prior = (f"#{earlier} is the closest earlier experiment on the probe; this plan keeps its metric (the mean "
             "accuracy of the last three epochs) so the numbers compare. " if earlier else "")
    return f"""The owner answered my questions; here is the plan (demo).

## Goal
{goal}

## Hypothesis
The two seeds land within two points of accuracy of each other.

## Prediction
{"Accuracy of 0.78–0.84 on both seeds after two epochs." if short_run else "Accuracy of 0.90–0.94 on both seeds."}

## Kill Criterion
Stop if a seed fails to finish.

## Experimental Setup
{code}

## Compute and Hardware
Two local pods for about two minutes each: $0.00 in total (local pods cost nothing; the same run
on two RTX 4090s on RunPod would cost a few cents).

## Artifacts
A metrics JSON and an SVG chart per pod.

## Verification
Both metrics files exist and report an accuracy between 0 and 1.

## Risks and Red Team
{prior}Two seeds say little about variance.
### Critique loop notes
One critique round; passed.

## Likely Clean Result
A bar per seed with its accuracy.

## Approval Checklist
- [x] The goal matches the record
- [ ] Two seeds are enough for a demo

[TEXTBOX:anything-else]

```runpod-spec
{json.dumps(_pod_spec(code_stage, command), indent=1)}
```
"""


CLEAN_RESULT = """<section id="tldr"><h2>TL;DR</h2><ul>
<li><strong>Motivation:</strong> I wanted to know how much the probe moves between seeds.</li>
<li><strong>What I ran:</strong> two seeds of the probe on two local pods.</li>
<li><strong>Results:</strong> both seeds land within two points (<a href="#figure">figure</a>).</li>
<li><strong>Next steps:</strong> run ten seeds before trusting a single number.</li></ul></section>
<figure id="figure"><svg viewBox="0 0 120 40" role="img"><rect x="10" y="10" width="90" height="8" fill="#4263eb">
<title>seed 0: accuracy 0.90</title></rect><rect x="10" y="24" width="92" height="8" fill="#4263eb">
<title>seed 1: accuracy 0.92</title></rect></svg><figcaption>Accuracy by seed</figcaption></figure>
<details><summary>Experimental design</summary><p>Two seeds, eight epochs each, on local pods.
This is Sagan's scripted demo; the numbers are illustrative.</p></details>"""


SURVEY_QUESTIONS = [
    {"key": "years", "text": "Which years of papers should the survey cover?"},
    {"key": "papers", "text": "How many papers are enough to call a schedule common?"}]


def survey_plan() -> str:
    """The survey's plan: the pod-free path (no runpod-spec, nothing to dispatch)."""
    return """The owner answered my questions; here is the plan (demo). A survey runs no pods.

## Goal
Find which sparsity schedules recent pruning papers use.

## Hypothesis
Most recent pruning papers ramp sparsity up with a cubic schedule.

## Prediction
At least 6 of the 10 papers read use a cubic schedule.

## Kill Criterion
Stop if fewer than 10 papers state their schedule.

## Experimental Setup
Read 10 pruning papers from 2023–2026 (web search and earlier experiments); note each one's
schedule in a table.

## Compute and Hardware
None: a survey is read and written by the agents; no pods, no GPU cost.

## Artifacts
The table of papers and schedules, in the clean result.

## Verification
Every row of the table names its paper.

## Risks and Red Team
Ten papers from a few labs may over-represent one habit.
### Critique loop notes
One critique round; passed.

## Likely Clean Result
A table of schedules with their counts and a one-sentence finding.

## Approval Checklist
- [x] No GPU work is needed
- [ ] Ten papers are enough for a demo

[TEXTBOX:anything-else]
"""


SURVEY_RESULT = """<section id="tldr"><h2>TL;DR</h2><ul>
<li><strong>Motivation:</strong> I wanted to know which sparsity schedule recent pruning papers use.</li>
<li><strong>What I ran:</strong> a reading of 10 pruning papers, no pods.</li>
<li><strong>Results:</strong> 7 of 10 papers use a cubic schedule (<a href="#figure">table</a>).</li>
<li><strong>Next steps:</strong> compare a cubic and a linear schedule on the probe.</li></ul></section>
<figure id="figure"><table><caption>Sparsity schedules in 10 pruning papers (illustrative)</caption>
<tr><th>Schedule</th><th>Papers</th></tr><tr><td>cubic</td><td>7</td></tr><tr><td>linear</td><td>2</td></tr>
<tr><td>one-shot</td><td>1</td></tr></table><figcaption>Schedules by paper count</figcaption></figure>
<details><summary>Experimental design</summary><p>10 papers from 2023–2026, read by the agents; no pods.
This is Sagan's scripted demo; the papers and counts are illustrative.</p></details>"""

def is_survey(brief: str) -> bool:
    """The brief names the experiment's kind; surveys and infra tasks take the pod-free path."""
    return bool(re.search(r"Kind: (survey|infra)\.", brief))


# What run_analysis runs for the demo's analyzer: the two pods' metrics → the numbers and the
# primary figure (an SVG, which becomes an artifact the clean result embeds).
ANALYSIS_CODE = """import glob, json
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

plt.rcParams["svg.fonttype"] = "none"  # text stays text: small, and sharp on a phone
runs = sorted((json.load(open(path)) for path in glob.glob("/artifacts/**/metrics-*.json", recursive=True)),
              key=lambda metrics: metrics["seed"])
seeds = [f"seed {metrics['seed']}" for metrics in runs]
accuracy = [metrics["accuracy"] for metrics in runs]
spread = (max(accuracy) - min(accuracy)) * 100
print("accuracy by seed: " + ", ".join(f"{s} {a:.3f}" for s, a in zip(seeds, accuracy))
      + f" (a spread of {spread:.1f} points)")
fig, ax = plt.subplots(figsize=(4, 2.5))
bars = ax.bar(seeds, accuracy, color="#4263eb")
ax.bar_label(bars, fmt="%.3f")
ax.set_ylim(min(accuracy) - 0.05, 1.0)
ax.set_ylabel("accuracy (last three epochs)")
ax.set_title("Accuracy by seed")
fig.tight_layout()
fig.savefig("accuracy-by-seed.svg")
"""
_FIGURE = re.compile(r'<figure id="figure">.*?</figure>', re.S)
_RESULTS = "both seeds land within two points (<a href=\"#figure\">figure</a>)."


def clean_result(commit: str | None, figure: str | None = None, numbers: str | None = None, *,
                 short_run: bool = False) -> str:
    """The demo's clean result; it names the reviewed commit the pods ran, when there was one,
    and embeds the figure the analysis drew (with its numbers), when there was one."""
    html = CLEAN_RESULT
    design = "Two seeds, eight epochs each, on local pods"
    if short_run:
        short = f"Two seeds, {demo_repo.SHORT_RUN_EPOCHS} epochs each, on local pods"
        html, design = html.replace(design, short), short
    if commit:
        fixed = "mean() and the short-run crash fixed and reviewed" if short_run else "mean() fixed and reviewed"
        html = html.replace(f"{design}.", f"{design}, running commit <code>{commit[:12]}</code> ({fixed}).")
    if figure:
        html = "<style>#figure img{max-width:100%;height:auto}</style>\n" + _FIGURE.sub(
            f'<figure id="figure"><img src="artifact:{figure}" alt="Accuracy of each seed, one bar per pod">'
            "<figcaption>Accuracy by seed, drawn by the analysis from the two pods' metrics files"
            "</figcaption></figure>", html)
    if numbers:
        html = html.replace(_RESULTS, f'{numbers} (<a href="#figure">figure</a>).')
    return html


def reply(*blocks, stop_reason=None) -> dict:
    return anthropic_server.reply(*blocks, stop_reason=stop_reason, model=MODEL)


text = anthropic_server.text


def tool(name: str, data: dict) -> dict:
    return anthropic_server.tool_use(name, data)


def _turns(messages) -> int:
    """Tool-calling turns the agent has taken so far in this conversation."""
    return sum(1 for m in messages if m["role"] == "assistant" and isinstance(m["content"], list)
               and any(b.get("type") == "tool_use" for b in m["content"]))


def _brief(messages) -> str:
    first = messages[0]["content"] if messages else ""
    return first if isinstance(first, str) else json.dumps(first)


def _calls(messages) -> list[tuple[str, dict, str]]:
    """(tool name, input, result text) of every tool call so far, oldest first."""
    results = {}
    for message in messages:
        if message["role"] == "user" and isinstance(message["content"], list):
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    content = block.get("content")
                    results[block.get("tool_use_id")] = content if isinstance(content, str) else json.dumps(content)
    return [(b["name"], b.get("input") or {}, results.get(b["id"], ""))
            for m in messages if m["role"] == "assistant" and isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_use"]


def _last_update(messages) -> str:
    """What Sagan told the agent in the latest turn, if it was woken: the sub-agents' outcomes
    it appended to the results of the calls that started them ("Sub-agent … ended …"), and
    the "Update while you waited: …" text after them."""
    last = messages[-1] if messages else {}
    if last.get("role") != "user":
        return ""
    content = last.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    texts = []
    for block in blocks:
        if block.get("type") == "tool_result":
            inner = block.get("content")
            texts += [inner] if isinstance(inner, str) else [b.get("text", "") for b in inner or []]
        elif block.get("type") == "text":
            texts.append(block.get("text", ""))
    return "\n".join(t for t in texts if "Sub-agent " in t or t.startswith("Update while you waited"))


@lru_cache(maxsize=1)
def _agents_by_prompt() -> dict[str, str]:
    from services.claude import loader
    return {loader.get(name).prompt: name for name in loader.names()}


def _scripted(script: list[dict], turn: int, done: str) -> dict:
    return script[turn] if turn < len(script) else reply(text(done))


def _planner(messages, brief: str, code_stage: bool) -> dict:
    calls = _calls(messages)
    done = {name for name, _, _ in calls}
    if is_survey(brief):
        if "epm:clarify-answers" not in brief:
            return _scripted([reply(tool("ask_questions", {"questions": SURVEY_QUESTIONS}))], len(calls),
                             "Done (demo planner).")
        if "submit_plan" not in done:
            return reply(tool("submit_plan", {"markdown": survey_plan()}))
        return reply(text("Done (demo planner)."))
    if "epm:clarify-answers" not in brief:
        script = [reply(tool("ask_questions", {"questions": [
            {"key": "seeds", "text": "How many seeds should the demo run?"},
            {"key": "metric", "text": "Which metric matters most?"}]}))]
        return _scripted(script, len(calls), "Done (demo planner).")
    if code_stage and "repo_read_file" not in done:
        # Ground the command in the code, and the plan in earlier work, before writing it.
        return reply(text("Reading the probe's argument parser and earlier probe experiments first (demo)."),
                     tool("repo_read_file", {"path": "probe.py"}), tool("search_experiments", {"text": "probe"}))
    source = next((result for name, _, result in calls if name == "repo_read_file"), None)
    own = re.search(r"# Experiment #(\d+)", brief)
    earlier = _earlier_experiment(next((result for name, _, result in calls if name == "search_experiments"), ""),
                                  int(own[1]) if own else None)
    if earlier is not None and "read_experiment" not in done:
        return reply(tool("read_experiment", {"number": earlier}))
    if "submit_plan" not in done:
        return reply(tool("submit_plan", {"markdown": demo_plan(
            code_stage, short_run=SHORT_RUN_TITLE in brief, probe_source=source, earlier=earlier)}))
    return reply(text("Done (demo planner)."))


def _earlier_experiment(search_result: str, own: int | None) -> int | None:
    """The closest earlier experiment search_experiments found: one with a clean result first,
    then the newest; never a later one (the run's own is never listed)."""
    try:
        found = json.loads(search_result).get("experiments") or []
    except (ValueError, AttributeError):
        return None
    earlier = [e for e in found if isinstance(e, dict) and (own is None or e.get("number", own) < own)]
    earlier.sort(key=lambda e: (not e.get("hasCleanResult"), -e["number"]))
    return earlier[0]["number"] if earlier else None


_SURVEY_ORCHESTRATION = [
    reply(text("A survey runs no pods: straight to the write-up (demo)."),
          tool("set_status", {"status": "clean_result_drafting", "note": "Survey: no pods; the write-up is the result."})),
    reply(tool("spawn_agent", {"agent": "analyzer", "request": "Write the survey's clean result from the papers read."})),
    reply(tool("spawn_agent", {"agent": "clean-result-critic", "request": "Review the clean result, round 1."})),
    reply(tool("post_marker", {"marker": "epm:awaiting-promotion", "note": "Clean result ready for the owner.",
                               "next_status": "awaiting_promotion"})),
]

_ANALYSIS = [
    reply(text("Pods finished; asking the analyzer."),
          tool("spawn_agent", {"agent": "analyzer", "request": "Interpret the results and write the clean result."})),
    reply(tool("spawn_agent", {"agent": "interpretation-critic", "request": "Review the interpretation, round 1."})),
    reply(tool("spawn_agent", {"agent": "clean-result-critic", "request": "Review the clean result, round 1."})),
    reply(tool("post_marker", {"marker": "epm:awaiting-promotion", "note": "Clean result ready for the owner.",
                               "next_status": "awaiting_promotion"})),
]


def _orchestrator(messages, code_stage: bool) -> dict:
    calls = _calls(messages)
    if is_survey(_brief(messages)):
        return _scripted(_SURVEY_ORCHESTRATION, len(calls), "The survey's clean result awaits promotion (demo).")
    if not code_stage or any(name == "launch_pods" for name, _, _ in calls):
        # Dispatch the approved spec directly (also when code_step found no repository).
        script = [reply(text("Dispatching the approved spec (demo)."), tool("launch_pods", {})),
                  reply(tool("wait_for_pods", {})), *_ANALYSIS]
        done = sum(1 for name, _, _ in calls if name != "code_step")
        return _scripted(script, done, "The clean result awaits promotion (demo).")
    if not calls:
        return reply(text("Starting the code loop (demo)."), tool("code_step", {}))
    name, data, result = calls[-1]
    if name == "code_step":
        if "No research repository is configured" in result:
            return reply(text("No code loop here; dispatching the approved spec (demo)."), tool("launch_pods", {}))
        update = _last_update(messages)
        if "Sub-agent pod-provisioner" in update:
            if "ended failed: pod_exit_nonzero" in update:
                return reply(text("A pod exited non-zero; finding it and reading its log (demo)."),
                             tool("list_pods", {}))
            if "ended failed" in update or "ended cancelled" in update:
                return reply(text("The pods did not finish; the timeline has the evidence (demo)."))
            return _ANALYSIS[0]
        if "You are parked" in result:
            return reply(tool("code_step", {}))
        return reply(text(f"The code loop stopped here (demo): {result[:500]}"))
    if name == "list_pods":
        crashed = _crashed_pod(result)
        if crashed is None:
            return reply(text("No pod crashed after all; stopping so the owner can look (demo)."))
        return reply(tool("read_pod_logs", {"pod": crashed, "tail": 200}))
    if name == "read_pod_logs":
        error = _exception_line(result)
        if error is None:
            return reply(text("The log shows no traceback, so it is not the code's crash; the owner decides (demo)."))
        return reply(text("A traceback in the research code: back to the implementer (demo)."),
                     tool("send_crash_to_code", {"pod": data["pod"], "note": f"The pod's command crashed with {error}; "
                                                 "the approved command must run as it stands."}))
    if name == "send_crash_to_code":
        if "You are parked" not in result:
            return reply(text(f"The crash could not go back to the code (demo): {result[:500]}"))
        return reply(tool("code_step", {}))
    spawned = sum(1 for call_name, _, _ in calls if call_name in ("spawn_agent", "post_marker"))
    return _scripted(_ANALYSIS, spawned, "The clean result awaits promotion (demo).")


def _crashed_pod(list_pods_result: str) -> str | None:
    """The latest pod list_pods shows with a non-zero exit code."""
    try:
        pods = json.loads(list_pods_result)
    except ValueError:
        return None
    crashed = [pod["name"] for pod in pods if isinstance(pod, dict) and pod.get("exitCode") not in (None, 0)]
    return crashed[-1] if crashed else None


def _exception_line(log: str) -> str | None:
    """The exception a Python traceback in the log ended with, or None without a traceback."""
    if "Traceback (most recent call last):" not in log:
        return None
    tail = log[log.rfind("Traceback (most recent call last):"):].splitlines()
    return next((line.strip() for line in tail[1:] if line and not line.startswith((" ", "\t"))), "an exception")


def _implementer(brief: str, turn: int) -> dict:
    round_ = int((re.search(r"Code round (\d+)", brief) or [None, "1"])[1])
    if "Traceback (most recent call last):" in brief:
        # The round a pod's crash opened (send_crash_to_code): the traceback is in the brief.
        change = tool("write_file", {"path": "probe.py", "content": demo_repo.FIXED_PROBE})
        message = "probe.py: a run shorter than four epochs measures its gain from the first epoch"
        note = "Fixed the crash: the gain read accuracies[-4], which a two-epoch run does not have."
    elif round_ == 1:
        change = tool("write_file", {"path": "stats.py", "content": demo_repo.FIXED_STATS})
        message, note = "mean() divides by the number of values, not one more", "Fixed stats.mean(): it divided by n + 1."
    else:
        change = tool("apply_patch", {"patch": demo_repo.EMPTY_INPUT_PATCH})
        message, note = "mean() of no values raises ValueError", "mean([]) now raises ValueError, with a test."
    script = [
        reply(text(f"Code round {round_} (demo implementer)."), change),
        reply(tool("run_command", {"command": demo_repo.TEST_COMMAND})),
        reply(tool("git_commit", {"message": message})),
        reply(tool("git_push", {})),
        reply(tool("post_marker", {"marker": "epm:experiment-implementation", "note": note,
                                   "metadata": {"round": round_}})),
    ]
    return _scripted(script, turn, f"Round {round_} committed and pushed (demo).")


def _reviewer(agent: str, brief: str, turn: int) -> dict:
    round_ = int((re.search(r"Review code round (\d+)", brief) or [None, "1"])[1])
    marker = "epm:code-review" if agent == "code-reviewer" else "epm:code-review-codex"
    review = {"marker": marker, "review_pair": "code_review", "round": round_, "reviewer": agent, "verdict": "pass",
              "note": f"{agent} (demo): the change does what the plan needs."}
    if agent == "code-reviewer" and round_ == 1:
        review.update(verdict="needs_targeted_fix", required_fix=demo_repo.REVIEW_FIX,
                      note=f"{agent} (demo): the division is fixed; one edge case is left.")
    first = tool("git_diff", {}) if agent == "code-reviewer" else tool("get_plan", {})
    script = [reply(first), reply(tool("post_marker", review))]
    return _scripted(script, turn, f"{review['verdict']} (demo {agent}).")


def _provisioner(turn: int) -> dict:
    script = [reply(text("Dispatching the approved spec at the reviewed commit (demo)."), tool("launch_pods", {})),
              reply(tool("post_marker", {"marker": "epm:pod-dispatched", "note": "Two local pods (demo)."})),
              reply(tool("wait_for_pods", {}))]
    return _scripted(script, turn, "Both pods finished (demo provisioner).")


def _analyzer(messages, brief: str) -> dict:
    """List the uploads, compute and draw with run_analysis, then interpret and write the result
    around the figure it drew (or, when the analysis could not run, the illustrative one)."""
    commit = re.search(r"Code: branch \S+ commit ([0-9a-f]{7,40})", brief)
    calls = _calls(messages)
    done = {name for name, _, _ in calls}
    if is_survey(brief):
        script = [reply(tool("post_marker", {"marker": "epm:interpretation",
                                             "note": "7 of 10 papers use a cubic schedule; the prediction held."})),
                  reply(tool("write_clean_result", {"title": "Most recent pruning papers use a cubic sparsity "
                                                             "schedule (LOW confidence)", "html": SURVEY_RESULT}))]
        return _scripted(script, len(calls), "The survey's write-up is done (demo).")
    if "list_artifacts" not in done:
        return reply(text("Listing what the pods uploaded (demo)."), tool("list_artifacts", {}))
    if "run_analysis" not in done:
        return reply(text("Computing the accuracy per seed and drawing the figure (demo)."),
                     tool("run_analysis", {"code": ANALYSIS_CODE}))
    analysis = next(result for name, _, result in calls if name == "run_analysis")
    figure = re.search(r"^- (analysis/\S+\.svg) \(", analysis, re.M)
    numbers = re.search(r"accuracy by seed: (.+)", analysis)
    short_run = SHORT_RUN_TITLE in brief
    if "post_marker" not in done:
        spread = re.search(r"a spread of ([\d.]+) points", numbers[1]) if numbers else None
        held = spread is None or float(spread[1]) <= 2
        note = (f"Accuracy by seed: {numbers[1]}. " if numbers else "") + \
            ("Both seeds land within two points; the prediction held." if held
             else "The seeds are more than two points apart; the prediction did not hold.")
        return reply(tool("post_marker", {"marker": "epm:interpretation", "note": note}))
    if "write_clean_result" not in done:
        title = ("Two epochs of the probe already land both seeds within two points (LOW confidence)" if short_run
                 else "Two seeds of the probe agree within two points (LOW confidence)")
        return reply(tool("write_clean_result", {"title": title, "html": clean_result(
            commit[1] if commit else None, figure[1] if figure else None, numbers[1] if numbers else None,
            short_run=short_run)}))
    belief_step = _belief_update(calls, done, short_run)
    if belief_step is not None:
        return belief_step
    if "set_status" not in done:
        return reply(tool("set_status", {"status": "clean_result_drafting", "note": "Draft written (demo)."}))
    return reply(text("Interpretation and draft done (demo)."))


def _belief_update(calls, done: set, short_run: bool) -> dict | None:
    """The beliefs this experiment tests (the demo journey's tests one, seeded by
    services.pipeline.demo): read it, propose an update for the owner at the version read,
    and link the result as supporting it. None once there is nothing (more) to do."""
    if "search_beliefs" not in done:
        return reply(text("Looking for the beliefs this experiment tests (demo)."),
                     tool("search_beliefs", {"linked": True}))
    found = re.search(r'"cite": "(B\d+)"', next(result for name, _, result in calls if name == "search_beliefs"))
    if found is None:
        return None
    cite = found[1]
    if "read_belief" not in done:
        return reply(tool("read_belief", {"belief": cite}))
    if "propose_belief_update" not in done:
        read = next(result for name, _, result in calls if name == "read_belief")
        version = re.search(r'"version": (\d+)', read)
        return reply(text(f"Proposing an update to {cite} for the owner (demo)."), tool("propose_belief_update", {
            "belief": cite, "status": "supported", "confidence": "LOW",
            "text": "Two seeds of the probe land within two points of accuracy"
                    + (" already after two epochs." if short_run else "."),
            "evidence": "This experiment's two seeds: see its clean result.",
            "reasoning": "Both seeds landed within two points, as predicted; two seeds are little evidence, so "
                         "LOW confidence (demo).",
            "based_on_version": int(version[1]) if version else 1}))
    if "add_link" not in done:
        return reply(tool("add_link", {"kind": "supports", "target": cite, "from_result": True,
                                       "note": "Both seeds within two points (demo)."}))
    return None


def _critic(agent: str, turn: int) -> dict:
    """The critic pair: each reads the evidence its prompt names first (the uploads for the
    interpretation, the write-up itself for the clean result), then passes round 1."""
    if agent == "interpretation-critic":
        marker, pair, read = "epm:interp-critique", "interpretation", tool("list_artifacts", {})
    else:
        marker, pair, read = "epm:clean-result-critique", "clean_result", tool("get_experiment", {})
    script = [reply(text("Reading the evidence first (demo)."), read),
              reply(tool("post_marker", {"marker": marker, "review_pair": pair, "round": 1, "reviewer": agent,
                                         "verdict": "pass", "note": f"{agent} (demo): the claims match the numbers."}))]
    return _scripted(script, turn, f"Pass (demo {agent}).")


def _proposer(turn: int) -> dict:
    script = [reply(tool("propose_follow_ups", {"experiments": [{
                  "title": "Do ten seeds of the probe agree within two points?",
                  "hypothesis": "With ten seeds the spread stays under two points; two seeds could not show it."}]})),
              reply(tool("post_marker", {"marker": "epm:follow-ups", "note": "One follow-up: ten seeds (demo)."}))]
    return _scripted(script, turn, "Proposed one follow-up (demo).")


def _weekly_reviewer(messages) -> dict:
    """Read the week, save a review built from the record's own draft (every #N kept), then
    suggest each run's classification from how it ended: completed runs useful, failed not."""
    calls = _calls(messages)
    done = {name for name, _, _ in calls}
    if "read_weekly_review" not in done:
        return reply(text("Reading the week's record (demo)."), tool("read_weekly_review", {}))
    week = json.loads(next(result for name, _, result in calls if name == "read_weekly_review"))
    if "write_weekly_review" not in done:
        body = week["text"].replace("## What we learned", "Written by the demo's scripted weekly-review agent from "
                                    "the week's record.\n\n## What we learned", 1)
        return reply(tool("write_weekly_review", {"body_md": body}))
    if "classify_runs" not in done and week["runs"]:
        return reply(tool("classify_runs", {"runs": [
            {"id": run["id"], "classification": "useful" if run["status"] == "completed" else
             "not_useful" if run["status"] in ("failed", "cancelled") else "pending"} for run in week["runs"]]}))
    return reply(text("The weekly review is drafted (demo)."))


def respond(body: dict, code_stage: bool = False) -> dict:
    """What the scripted agent answers to one Messages API call."""
    messages = body.get("messages") or []
    agent = _agents_by_prompt().get(anthropic_server.system_text(body), "")
    turn, brief = _turns(messages), _brief(messages)
    if agent == "experiment-planner":
        return _planner(messages, brief, code_stage)
    if agent == "experiment-orchestrator":
        return _orchestrator(messages, code_stage)
    if agent == "experiment-implementer":
        return _implementer(brief, turn)
    if agent in ("code-reviewer", "code-plan-reviewer"):
        return _reviewer(agent, brief, turn)
    if agent == "pod-provisioner":
        return _provisioner(turn)
    if agent == "analyzer":
        return _analyzer(messages, brief)
    if agent in ("interpretation-critic", "clean-result-critic"):
        return _critic(agent, turn)
    if agent == "follow-up-proposer":
        return _proposer(turn)
    if agent == "weekly-review":
        return _weekly_reviewer(messages)
    return reply(text(f"This demo agent has no script for {agent or 'that request'}."))


class DemoAgents:
    """The loopback server; `url` is what ANTHROPIC_BASE_URL points at. `code_stage` may be
    turned on after start, once the demo repository is known to be set up."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, code_stage: bool = False):
        self.code_stage = code_stage
        self.fake = anthropic_server.FakeAnthropic(default=self._answer, bind=(host, port), record=False)

    def _answer(self, body: dict) -> dict:
        try:
            return respond(body, self.code_stage)
        except Exception as exc:  # noqa: BLE001 - answer like the API would, never crash
            return anthropic_server.error(500, "api_error", str(exc))

    @property
    def url(self) -> str:
        return self.fake.url

    def start(self) -> "DemoAgents":
        self.fake.start()
        return self

    def stop(self) -> None:
        self.fake.stop()


if __name__ == "__main__":
    import time
    agents = DemoAgents(port=0).start()
    print(agents.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        agents.stop()
