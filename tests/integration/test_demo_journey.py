"""`make demo`'s journey: the tiny research repository (services/code/demo_repo.py) and the
scripted agents' decisions (scripts/demo_agents.py). The whole journey through a worker,
the sandbox, local pods and a browser is tests/e2e/test_journey.py."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import AgentRun, ApprovalRequest, Artifact, Experiment, Pod, RunEvent, WorkflowEvent, db
from services.code import demo_repo
from services.core import settings
from services.core.actors import Actor
from services.dispatch import watcher
from services.pipeline import demo
from services.planning import approvals, plans, questions
from services.workflow import experiments, lifecycle, parking
from tests.integration.code_fixtures import git

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import demo_agents  # noqa: E402

REPO_KEYS = ("research_repo_url", "research_repo_branch", "research_repo_test_command", "research_repo_lint_command")


@pytest.fixture
def demo_dirs(app, monkeypatch):
    """The demo repository and the worktrees in a /tmp folder `nobody` may walk into."""
    base = Path(tempfile.mkdtemp(prefix="sagan-demo-", dir="/tmp"))
    os.chmod(base, 0o711)
    monkeypatch.setitem(app.config, "SAGAN_DEMO_REPO_DIR", str(base / "demo-research"))
    monkeypatch.setitem(app.config, "SAGAN_WORKSPACES_DIR", str(base / "workspaces"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _unittest(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "unittest", "-q"], cwd=folder, capture_output=True, text=True)


def _repo_settings() -> dict:
    return {key: settings.get(key) for key in REPO_KEYS}


# --- the repository ------------------------------------------------------------------------------

def test_ensure_builds_the_repository_and_configures_it(app_ctx, demo_dirs):
    """Does ensure() make a bare origin with one commit and point every research-repository setting at it?"""
    stage = demo_repo.ensure()
    db.session.commit()
    assert stage.on, stage.reason
    assert stage.line().startswith("Code-writing stage: on")
    origin = demo_dirs / "demo-research" / "origin.git"
    assert _repo_settings() == {"research_repo_url": str(origin), "research_repo_branch": "main",
                                "research_repo_test_command": demo_repo.TEST_COMMAND,
                                "research_repo_lint_command": demo_repo.LINT_COMMAND}
    files = git(f"--git-dir={origin}", "ls-tree", "--name-only", "main", cwd=demo_dirs).split()
    assert sorted(files) == sorted(demo_repo.FILES)


def test_ensure_twice_keeps_the_repository(app_ctx, demo_dirs):
    """Is a second ensure() (the next `make demo`) a no-op that keeps the branches pushed since?"""
    demo_repo.ensure()
    origin = demo_dirs / "demo-research" / "origin.git"
    git(f"--git-dir={origin}", "branch", "experiment-1", "main", cwd=demo_dirs)
    stage = demo_repo.ensure()
    assert stage.on
    assert "experiment-1" in git(f"--git-dir={origin}", "branch", "--list", cwd=demo_dirs)


def test_the_bug_the_fix_and_the_reviewers_patch(demo_dirs, app_ctx):
    """Does the repository's test fail on main, pass with the implementer's fix, and does the
    reviewer's patch apply on top with its new test passing too?"""
    demo_repo.ensure()
    work = demo_dirs / "clone"
    git("clone", "--quiet", str(demo_dirs / "demo-research" / "origin.git"), str(work), cwd=demo_dirs)
    assert _unittest(work).returncode != 0  # mean() divides by n + 1
    (work / "stats.py").write_text(demo_repo.FIXED_STATS)
    assert _unittest(work).returncode == 0
    patch = subprocess.run(["git", "apply", "-"], cwd=work, input=demo_repo.EMPTY_INPUT_PATCH, text=True,
                           capture_output=True)
    assert patch.returncode == 0, patch.stderr
    result = _unittest(work)
    assert result.returncode == 0, result.stderr
    assert "Ran 3 tests" in result.stderr


def test_the_probe_writes_metrics_and_a_chart(demo_dirs, app_ctx, tmp_path):
    """Does probe.py, run as a pod would (fixed mean, no progress URL), write its metrics JSON and SVG?"""
    import json
    demo_repo.ensure()
    work = demo_dirs / "clone"
    git("clone", "--quiet", str(demo_dirs / "demo-research" / "origin.git"), str(work), cwd=demo_dirs)
    (work / "stats.py").write_text(demo_repo.FIXED_STATS)
    probe = (work / "probe.py").read_text().replace("SECONDS_PER_EPOCH = 1.5", "SECONDS_PER_EPOCH = 0")
    (work / "probe.py").write_text(probe)
    out = tmp_path / "artifacts"
    env = {"PATH": os.environ["PATH"], "SAGAN_RUN_INDEX": "1", "SAGAN_ARTIFACT_DIR": str(out),
           "SAGAN_GIT_COMMIT": "abc123"}
    result = subprocess.run([sys.executable, "probe.py"], cwd=work, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((out / "metrics-1.json").read_text())
    assert metrics["seed"] == 1 and metrics["commit"] == "abc123" and len(metrics["epochs"]) == 8
    assert 0.88 < metrics["accuracy"] < 0.95
    assert (out / "accuracy-1.svg").read_text().count("<title>") == 8


def test_the_probe_posts_its_curves_through_the_metrics_helper(demo_dirs, app_ctx, tmp_path):
    """With the helper on PYTHONPATH (as the bootstrap puts it), probe.py posts a loss curve
    and the accuracy per epoch as metric batches: what the demo's charts draw."""
    batches = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the http.server hook's name
            batches.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        demo_repo.ensure()
        work = demo_dirs / "clone"
        git("clone", "--quiet", str(demo_dirs / "demo-research" / "origin.git"), str(work), cwd=demo_dirs)
        (work / "stats.py").write_text(demo_repo.FIXED_STATS)
        probe = (work / "probe.py").read_text().replace("SECONDS_PER_EPOCH = 1.5", "SECONDS_PER_EPOCH = 0")
        (work / "probe.py").write_text(probe)
        env = {"PATH": os.environ["PATH"], "SAGAN_RUN_INDEX": "0", "SAGAN_ARTIFACT_DIR": str(tmp_path / "out"),
               "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "scripts"),
               "SAGAN_METRICS_URL": f"http://127.0.0.1:{server.server_address[1]}/api/metrics",
               "SAGAN_POD_PROGRESS_TOKEN": "spt_test"}
        result = subprocess.run([sys.executable, "probe.py"], cwd=work, env=env, capture_output=True, text=True)
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 0, result.stderr
    points = [p for batch in batches for p in batch["points"]]
    assert len({b["seq"] for b in batches}) == len(batches)
    assert sum(p["name"] == "loss" for p in points) == 8 * demo_repo_steps()
    assert sum(p["name"] == "val/accuracy [%]" for p in points) == 8


def demo_repo_steps() -> int:
    return int(re.search(r"STEPS_PER_EPOCH = (\d+)", demo_repo.PROBE).group(1))


def test_another_configured_repository_is_left_alone(app_ctx, demo_dirs):
    """With the owner's own repository configured, is the code stage off, said why, and nothing changed?"""
    settings.put("research_repo_url", "https://git.example.org/lab/real.git")
    db.session.commit()
    before = _repo_settings()
    stage = demo_repo.ensure()
    assert not stage.on
    assert "https://git.example.org/lab/real.git" in stage.reason
    assert _repo_settings() == before
    assert not (demo_dirs / "demo-research").exists()


def test_without_bubblewrap_the_code_stage_is_off(app_ctx, demo_dirs, monkeypatch):
    """Without bwrap, is the stage off with what to install, and no repository made or configured?"""
    from services.code import sandbox
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    stage = demo_repo.ensure()
    assert not stage.on
    assert "bubblewrap" in stage.reason and "apt-get install bubblewrap" in stage.reason
    assert stage.line().startswith("Code-writing stage: off")
    assert settings.get("research_repo_url") in (None, "")
    assert not (demo_dirs / "demo-research").exists()


def test_a_sandbox_that_cannot_start_turns_the_code_stage_off(app_ctx, demo_dirs, monkeypatch):
    """bwrap installed but refused by the host (no user namespaces): is the stage off with bwrap's
    own message, instead of a demo that would block half-way?"""
    fake_bin = demo_dirs / "bin"
    fake_bin.mkdir()
    bwrap = fake_bin / "bwrap"
    bwrap.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    bwrap.chmod(0o755)
    os.chmod(fake_bin, 0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    stage = demo_repo.ensure()
    assert not stage.on
    assert "could not start a sandbox" in stage.reason and "setting up uid map: Permission denied" in stage.reason
    assert settings.get("research_repo_url") in (None, "")
    assert not (demo_dirs / "demo-research").exists()


def test_demo_journey_command_says_whether_code_runs(app, runner, demo_dirs):
    """Does `flask demo journey` create the experiment and print the code stage line `make demo` reads?"""
    result = runner.invoke(args=["demo", "journey"])
    assert result.exit_code == 0, result.output
    assert "Demo journey experiment: #1" in result.output
    assert "Demo crash-and-fix experiment: #2" in result.output  # the code stage is on here
    assert "Code-writing stage: on" in result.output
    again = runner.invoke(args=["demo", "journey"])
    assert "Demo journey experiment: #1" in again.output and "Code-writing stage: on" in again.output
    assert "Demo crash-and-fix experiment: #2" in again.output
    with app.app_context():
        assert experiments.get_experiment(2).title == demo.SHORT_RUN_TITLE


def test_without_the_code_stage_there_is_no_crash_and_fix_experiment(app, runner, demo_dirs, monkeypatch):
    """Its crash can only go back to an implementer when the code-writing stage runs."""
    from services.code import sandbox
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    result = runner.invoke(args=["demo", "journey"])
    assert result.exit_code == 0, result.output
    assert "Demo journey experiment: #1" in result.output and "crash-and-fix" not in result.output
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(Experiment.id))) == 1


def test_the_probe_parses_epochs_and_a_short_run_crashes_until_fixed(demo_dirs, app_ctx, tmp_path):
    """`probe.py --epochs 2` (the second demo experiment's command) exits 1 with an IndexError
    traceback at the demo's code; FIXED_PROBE, the implementer's fix after the crash, runs it."""
    demo_repo.ensure()
    work = demo_dirs / "clone"
    git("clone", "--quiet", str(demo_dirs / "demo-research" / "origin.git"), str(work), cwd=demo_dirs)
    (work / "stats.py").write_text(demo_repo.FIXED_STATS)
    env = {"PATH": os.environ["PATH"], "SAGAN_RUN_INDEX": "0", "SAGAN_ARTIFACT_DIR": str(tmp_path / "out")}
    outcomes = []
    for source in (demo_repo.PROBE, demo_repo.FIXED_PROBE):
        (work / "probe.py").write_text(source.replace("SECONDS_PER_EPOCH = 1.5", "SECONDS_PER_EPOCH = 0"))
        outcomes.append(subprocess.run([sys.executable, "probe.py", "--epochs", "2"], cwd=work, env=env,
                                       capture_output=True, text=True))
    crashed, fixed = outcomes
    assert crashed.returncode == 1 and "Traceback (most recent call last):" in crashed.stderr
    assert "IndexError: list index out of range" in crashed.stderr
    assert fixed.returncode == 0, fixed.stderr
    metrics = json.loads((tmp_path / "out" / "metrics-0.json").read_text())
    assert len(metrics["epochs"]) == 2 and metrics["gain"] == round(metrics["epochs"][-1] - metrics["epochs"][0], 4)
    refused = subprocess.run([sys.executable, "probe.py", "--epochs", "two"], cwd=work, env=env,
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "invalid int value: 'two'" in refused.stderr


# --- the scripted agents --------------------------------------------------------------------------

def _prompt(name: str) -> str:
    from services.claude import loader
    return loader.get(name).prompt


def _ask(agent: str, messages: list, code_stage: bool = True) -> dict:
    return demo_agents.respond({"system": _prompt(agent), "messages": messages}, code_stage)


def _tool_calls(answer: dict) -> list[tuple[str, dict]]:
    return [(b["name"], b["input"]) for b in answer["content"] if b["type"] == "tool_use"]


def _after(messages: list, answer: dict, result: str, update: str | None = None) -> list:
    """The conversation after `answer`'s tool ran with `result` (and, if parked, a wake update)."""
    block = next(b for b in answer["content"] if b["type"] == "tool_use")
    messages = messages + [{"role": "assistant", "content": answer["content"]},
                           {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block["id"],
                                                         "content": result}]}]
    if update:  # as the loop sends it: a text block after the parked call's tool result
        messages[-1]["content"].append({"type": "text", "text": f"Update while you waited:\n{update}"})
    return messages


BRIEF = [{"role": "user", "content": "# Experiment #1: Demo\n\n## Your task\nCarry it."}]


def test_plans_are_valid_with_and_without_the_code_stage(app_ctx):
    """Does the planner's plan parse cleanly both ways, with the pods running probe.py only with code?"""
    for code_stage, command in ((True, "python3 probe.py"), (False, demo_agents.DOCKER_ARGS)):
        parsed = plans.parse(demo_agents.demo_plan(code_stage), account="local")
        assert parsed.problems == [], parsed.problems
        assert [pod["dockerArgs"] for pod in parsed.data["spec"]] == [command, command]
        assert parsed.data["textboxes"] == ["anything-else"] and len(parsed.data["checklist"]) == 2


def _commands(markdown: str) -> list[str]:
    parsed = plans.parse(markdown, account="local")
    assert parsed.problems == [], parsed.problems
    return [pod["dockerArgs"] for pod in parsed.data["spec"]]


def test_the_short_run_command_is_grounded_in_what_the_planner_read(app_ctx):
    """`--epochs 2` only when the probe the planner read parses `--epochs`; an older probe
    without the flag gets the plain command (a flag it does not know would crash the pod)."""
    assert _commands(demo_agents.demo_plan(True, short_run=True, probe_source=demo_repo.PROBE)) == \
        ["python3 probe.py --epochs 2"] * 2
    older = demo_repo.PROBE.replace('"--epochs"', '"--steps"')
    assert _commands(demo_agents.demo_plan(True, short_run=True, probe_source=older)) == ["python3 probe.py"] * 2
    assert _commands(demo_agents.demo_plan(True, probe_source=demo_repo.PROBE)) == ["python3 probe.py"] * 2
    cited = demo_agents.demo_plan(True, probe_source=demo_repo.PROBE, earlier=7)
    assert "#7 is the closest earlier experiment" in cited and "takes `--epochs` (default 8)" in cited


def test_planner_reads_the_probe_and_an_earlier_experiment_before_planning(app_ctx):
    """With the owner's answers in, the planner reads probe.py and searches earlier probe
    experiments, reads the one it found, and only then submits a plan whose command fits."""
    brief = [{"role": "user", "content": f"# Experiment #2: {demo.SHORT_RUN_TITLE}\n\n## Recent events\n"
                                         "- epm:clarify-answers: {}\n\n## Your task\nPlan it."}]
    first = _ask("experiment-planner", brief)
    assert _tool_calls(first) == [("repo_read_file", {"path": "probe.py"}), ("search_experiments", {"text": "probe"})]
    blocks = [b for b in first["content"] if b["type"] == "tool_use"]
    results = [demo_repo.PROBE, json.dumps({"experiments": [{"number": 1, "cite": "#1", "title": "Two seeds"}]})]
    messages = brief + [{"role": "assistant", "content": first["content"]},
                        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b["id"], "content": r}
                                                     for b, r in zip(blocks, results)]}]
    second = _ask("experiment-planner", messages)
    assert _tool_calls(second) == [("read_experiment", {"number": 1})]
    messages = _after(messages, second, "{\"number\": 1, \"clean_result_text\": \"The seeds agree.\"}")
    [(name, data)] = _tool_calls(_ask("experiment-planner", messages))
    assert name == "submit_plan" and "#1 is the closest earlier experiment" in data["markdown"]
    assert _commands(data["markdown"]) == ["python3 probe.py --epochs 2"] * 2
    # A later experiment is not evidence for this one: nothing is read or cited.
    later = json.dumps({"experiments": [{"number": 3, "cite": "#3", "title": "Ten seeds", "hasCleanResult": True}]})
    messages = brief + [{"role": "assistant", "content": first["content"]},
                        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b["id"], "content": r}
                                                     for b, r in zip(blocks, [demo_repo.PROBE, later])]}]
    [(name, data)] = _tool_calls(_ask("experiment-planner", messages))
    assert name == "submit_plan" and "#3" not in data["markdown"]
    # Without the code stage there is no repository to read: it plans straight away.
    [(name, _)] = _tool_calls(_ask("experiment-planner", brief, code_stage=False))
    assert name == "submit_plan"


def test_orchestrator_without_the_code_stage_dispatches_at_once(app_ctx):
    """With the code stage off, does the orchestrator launch the pods first and never call code_step?"""
    first = _ask("experiment-orchestrator", BRIEF, code_stage=False)
    assert _tool_calls(first) == [("launch_pods", {})]
    second = _ask("experiment-orchestrator", _after(BRIEF, first, "Dispatched 2 pods."), code_stage=False)
    assert _tool_calls(second) == [("wait_for_pods", {})]


def test_orchestrator_drives_the_code_loop_then_the_analysis(app_ctx):
    """code_step until the pod-provisioner reports back, then the analyzer, the critic, awaiting promotion."""
    first = _ask("experiment-orchestrator", BRIEF)
    assert _tool_calls(first) == [("code_step", {})]
    parked = "Started experiment-implementer as run ab12.\nYou are parked until they finish; call code_step again."
    messages = _after(BRIEF, first, parked, update="Sub-agent experiment-implementer (ab12) ended completed: done")
    again = _ask("experiment-orchestrator", messages)
    assert _tool_calls(again) == [("code_step", {})]
    messages = _after(messages, again, "Code review pair passed round 2; pod_spec branch/sha spliced; dispatching "
                                       "pod-provisioner\nStarted pod-provisioner as run cd34.\nYou are parked until "
                                       "they finish; call code_step again when you are woken.",
                      update="Sub-agent pod-provisioner (cd34) ended completed: Both pods finished (demo provisioner).")
    analysis = _ask("experiment-orchestrator", messages)
    assert _tool_calls(analysis)[0][0] == "spawn_agent" and _tool_calls(analysis)[0][1]["agent"] == "analyzer"
    messages = _after(messages, analysis, "Started analyzer.")
    for critic_name in ("interpretation-critic", "clean-result-critic"):
        critic = _ask("experiment-orchestrator", messages)
        assert _tool_calls(critic)[0][1]["agent"] == critic_name
        messages = _after(messages, critic, f"Started {critic_name}.")
    assert _tool_calls(_ask("experiment-orchestrator", messages))[0][1]["next_status"] == "awaiting_promotion"


def test_orchestrator_stops_when_the_code_loop_stops(app_ctx):
    """A code_step that neither parks nor finishes (e.g. the loop blocked) ends the run: no code_step loop."""
    first = _ask("experiment-orchestrator", BRIEF)
    messages = _after(BRIEF, first, "Tests still fail after round 3 on 0123456789ab; the code needs the owner's look")
    answer = _ask("experiment-orchestrator", messages)
    assert _tool_calls(answer) == [] and answer["stop_reason"] == "end_turn"
    failed = _after(BRIEF, first, "Started pod-provisioner as run cd34.\nYou are parked until they finish.",
                    update="Sub-agent pod-provisioner (cd34) ended failed: pods exited 1")
    assert _tool_calls(_ask("experiment-orchestrator", failed)) == []


def test_orchestrator_sends_a_crash_back_to_the_code_then_carries_on(app_ctx):
    """Pods crashed (the provisioner ended failed with pod_exit_nonzero): list_pods → the
    crashed pod's log → send_crash_to_code with the exception → code_step again once woken."""
    first = _ask("experiment-orchestrator", BRIEF)
    messages = _after(BRIEF, first, "Started pod-provisioner as run cd34.\nYou are parked until they finish.",
                      update="Sub-agent pod-provisioner (cd34) ended failed: pod_exit_nonzero: sagan-2-ab-1-1 "
                             "exited with code 1.")
    listing = _ask("experiment-orchestrator", messages)
    assert _tool_calls(listing) == [("list_pods", {})]
    pods = [{"name": "sagan-2-ab-0-1", "exitCode": 1}, {"name": "sagan-2-ab-1-1", "exitCode": 1}]
    messages = _after(messages, listing, json.dumps(pods))
    logs = _ask("experiment-orchestrator", messages)
    assert _tool_calls(logs) == [("read_pod_logs", {"pod": "sagan-2-ab-1-1", "tail": 200})]
    log = ("Log of pod sagan-2-ab-1-1 (stopped) from the local pod's output.log: 5 line(s).\n"
           "Traceback (most recent call last):\n  File \"probe.py\", line 69, in main\n"
           "    gain = round(accuracies[-1] - accuracies[-4], 4)\nIndexError: list index out of range\n")
    messages = _after(messages, logs, log)
    send = _ask("experiment-orchestrator", messages)
    [(name, data)] = _tool_calls(send)
    assert name == "send_crash_to_code" and data["pod"] == "sagan-2-ab-1-1"
    assert "IndexError: list index out of range" in data["note"]
    messages = _after(messages, send, "sagan-2-ab-1-1 crashed (exit 1) …\nStarted experiment-implementer as run "
                                      "ef56.\nYou are parked until they finish; call code_step again.",
                      update="Sub-agent experiment-implementer (ef56) ended completed: Round 3 committed.")
    assert _tool_calls(_ask("experiment-orchestrator", messages)) == [("code_step", {})]


def test_orchestrator_stops_when_the_crash_is_not_the_codes(app_ctx):
    """No traceback in the log, or send_crash_to_code refused: the run ends with text, no retry."""
    first = _ask("experiment-orchestrator", BRIEF)
    messages = _after(BRIEF, first, "parked", update="Sub-agent pod-provisioner (cd34) ended failed: "
                                                     "pod_exit_nonzero: sagan-2-ab-0-1 exited with code 137.")
    listing = _ask("experiment-orchestrator", messages)
    messages = _after(messages, listing, json.dumps([{"name": "sagan-2-ab-0-1", "exitCode": 137}]))
    logs = _ask("experiment-orchestrator", messages)
    no_traceback = _ask("experiment-orchestrator", _after(messages, logs, "Killed\n"))
    assert _tool_calls(no_traceback) == [] and no_traceback["stop_reason"] == "end_turn"
    log = "Traceback (most recent call last):\n  File \"probe.py\"\nIndexError: list index out of range"
    messages = _after(messages, logs, log)
    send = _ask("experiment-orchestrator", messages)
    refused = _ask("experiment-orchestrator",
                   _after(messages, send, "Not sent to the implementer: the recovery budget is spent (3 of 3 in 24 h)."))
    assert _tool_calls(refused) == [] and "recovery budget is spent" in refused["content"][-1]["text"]
    vanished = _after(BRIEF, first, "parked", update="Sub-agent pod-provisioner (cd34) ended failed: pod_vanished: x")
    assert _tool_calls(_ask("experiment-orchestrator", vanished)) == []


def test_orchestrator_falls_back_when_no_repository_is_configured(app_ctx):
    """If code_step says there is no repository, does the orchestrator dispatch directly, then wait?"""
    first = _ask("experiment-orchestrator", BRIEF)
    messages = _after(BRIEF, first, "No research repository is configured, so there is no code loop: …")
    launch = _ask("experiment-orchestrator", messages)
    assert _tool_calls(launch) == [("launch_pods", {})]
    assert _tool_calls(_ask("experiment-orchestrator", _after(messages, launch, "Dispatched."))) == \
        [("wait_for_pods", {})]


def _walk(agent: str, brief: str) -> list[tuple[str, dict]]:
    """Every tool call the scripted agent makes for `brief`, feeding each an "ok" result."""
    messages, calls = [{"role": "user", "content": brief}], []
    for _ in range(10):
        answer = _ask(agent, messages)
        if not _tool_calls(answer):
            return calls
        calls += _tool_calls(answer)
        messages = _after(messages, answer, "ok")
    raise AssertionError(f"{agent} never stopped")


def test_implementer_fixes_then_applies_the_reviewers_fix(app_ctx):
    """Round 1 writes the fixed stats.py; round 2 applies the patch; both test, commit, push and post the marker."""
    one = _walk("experiment-implementer", "## Your task\nCode round 1 of #1. Implement the approved plan.")
    assert [name for name, _ in one] == ["write_file", "run_command", "git_commit", "git_push", "post_marker"]
    assert one[0][1] == {"path": "stats.py", "content": demo_repo.FIXED_STATS}
    assert one[-1][1]["marker"] == "epm:experiment-implementation" and one[-1][1]["metadata"] == {"round": 1}
    two = _walk("experiment-implementer", "## Your task\nCode round 2 of #1. Fix what round 1 found.")
    assert two[0] == ("apply_patch", {"patch": demo_repo.EMPTY_INPUT_PATCH})
    assert two[-1][1]["metadata"] == {"round": 2}


def test_reviewers_ask_for_one_fix_then_pass(app_ctx):
    """Round 1: the code reviewer needs a targeted fix, the plan reviewer passes; round 2: both pass."""
    def verdict(agent, round_):
        marker = _walk(agent, f"## Your task\nReview code round {round_} of #1: branch experiment-1.")[-1][1]
        assert marker["review_pair"] == "code_review" and marker["round"] == round_ and marker["reviewer"] == agent
        return marker["verdict"], marker.get("required_fix")
    assert verdict("code-reviewer", 1) == ("needs_targeted_fix", demo_repo.REVIEW_FIX)
    assert verdict("code-plan-reviewer", 1) == ("pass", None)
    assert verdict("code-reviewer", 2) == ("pass", None)
    assert verdict("code-plan-reviewer", 2) == ("pass", None)


def test_implementer_fixes_the_crash_a_pod_sent_back(app_ctx):
    """A round opened by send_crash_to_code (the traceback in its brief) fixes probe.py, then tests,
    commits, pushes and posts its marker like any round."""
    brief = ("## Your task\nCode round 3 of #2. A pod crashed:\n```\nTraceback (most recent call last):\n"
             "IndexError: list index out of range\n```")
    calls = _walk("experiment-implementer", brief)
    assert calls[0] == ("write_file", {"path": "probe.py", "content": demo_repo.FIXED_PROBE})
    assert [name for name, _ in calls[1:]] == ["run_command", "git_commit", "git_push", "post_marker"]
    assert calls[-1][1]["metadata"] == {"round": 3}


def test_analyzer_lists_computes_and_embeds_the_figure_it_drew(app_ctx):
    """list_artifacts → run_analysis (the two pods' metrics) → the interpretation with its numbers
    → a clean result whose primary figure is the analysis's SVG."""
    brief = [{"role": "user", "content": "# Experiment #1\n\n## Your task\nAnalyse."}]
    listing = _ask("analyzer", brief)
    assert _tool_calls(listing) == [("list_artifacts", {})]
    messages = _after(brief, listing, "- metrics-0.json\n- metrics-1.json")
    analysis = _ask("analyzer", messages)
    [(name, data)] = _tool_calls(analysis)
    assert name == "run_analysis" and data["code"] == demo_agents.ANALYSIS_CODE
    drawn = ("exit 0\nstdout:\naccuracy by seed: seed 0 0.906, seed 1 0.912 (a spread of 0.6 points)\n"
             "Files written, now artifacts of #1 (embed a figure with <img src=\"artifact:NAME\">):\n"
             "- analysis/ab12cd34/accuracy-by-seed.svg (image/svg+xml, 20,144 bytes)")
    messages = _after(messages, analysis, drawn)
    interpretation = _ask("analyzer", messages)
    [(name, data)] = _tool_calls(interpretation)
    assert name == "post_marker" and "seed 0 0.906, seed 1 0.912" in data["note"]
    messages = _after(messages, interpretation, "recorded")
    [(name, data)] = _tool_calls(_ask("analyzer", messages))
    assert name == "write_clean_result" and data["title"].endswith("(LOW confidence)")
    assert '<figure id="figure"><img src="artifact:analysis/ab12cd34/accuracy-by-seed.svg"' in data["html"]
    assert "seed 0 0.906, seed 1 0.912 (a spread of 0.6 points)" in data["html"]


def test_analyzer_proposes_an_update_to_the_belief_its_experiment_tests(app_ctx):
    """After the clean result: search_beliefs (linked) → read_belief → propose_belief_update at
    the version read → add_link supports from the result → set_status; with no belief, straight on."""
    brief = [{"role": "user", "content": "# Experiment #1\n\n## Your task\nAnalyse."}]
    messages, answer = brief, _ask("analyzer", brief)
    for _ in range(4):  # list_artifacts, run_analysis, post_marker, write_clean_result
        messages = _after(messages, answer, "ok")
        answer = _ask("analyzer", messages)
    assert _tool_calls(answer) == [("search_beliefs", {"linked": True})]
    messages = _after(messages, answer, '{"beliefs": [{"cite": "B3", "title": "Stable", "version": 2}]}')
    answer = _ask("analyzer", messages)
    assert _tool_calls(answer) == [("read_belief", {"belief": "B3"})]
    messages = _after(messages, answer, '{"cite": "B3", "version": 2}')
    answer = _ask("analyzer", messages)
    [(name, data)] = _tool_calls(answer)
    assert name == "propose_belief_update" and data["belief"] == "B3" and data["based_on_version"] == 2
    messages = _after(messages, answer, "Proposed.")
    answer = _ask("analyzer", messages)
    assert _tool_calls(answer) == [("add_link", {"kind": "supports", "target": "B3", "from_result": True,
                                                 "note": "Both seeds within two points (demo)."})]
    messages = _after(messages, answer, "Linked.")
    assert _tool_calls(_ask("analyzer", messages))[0][0] == "set_status"
    walked = [name for name, _ in _walk("analyzer", "# Experiment #1\n\n## Your task\nGo.")]
    assert walked[-2:] == ["search_beliefs", "set_status"]


def test_analyzer_names_the_commit_the_pods_ran(app_ctx):
    """Does the clean result name the commit from the brief, and stay the plain one without code?"""
    sha = "0123456789abcdef0123456789abcdef01234567"
    calls = _walk("analyzer", f"# Experiment #1\nCode: branch experiment-1 commit {sha}\n\n## Your task\nGo.")
    html = next(data["html"] for name, data in calls if name == "write_clean_result")
    assert "<code>0123456789ab</code>" in html
    plain = _walk("analyzer", "# Experiment #1\n\n## Your task\nGo.")
    assert next(data["html"] for name, data in plain if name == "write_clean_result") == demo_agents.CLEAN_RESULT


def test_the_critic_pair_passes_round_one(app_ctx):
    """Do both critics read their evidence (the uploads; the write-up), then post their own
    marker for their own pair, round 1, verdict pass?"""
    for agent, marker, pair, read in (
            ("interpretation-critic", "epm:interp-critique", "interpretation", "list_artifacts"),
            ("clean-result-critic", "epm:clean-result-critique", "clean_result", "get_experiment")):
        [(first, _), (name, data)] = _walk(agent, "## Your task\nReview, round 1.")
        assert first == read
        assert name == "post_marker" and data["marker"] == marker and data["review_pair"] == pair
        assert data["reviewer"] == agent and data["round"] == 1 and data["verdict"] == "pass"


def test_proposer_proposes_one_follow_up(app_ctx):
    """Does the demo's follow-up proposer propose one follow-up, post epm:follow-ups, then stop?"""
    calls = _walk("follow-up-proposer", "# Experiment #1\n\n## Your task\nPropose follow-ups.")
    assert [name for name, _ in calls] == ["propose_follow_ups", "post_marker"]
    assert len(calls[0][1]["experiments"]) == 1 and calls[1][1]["marker"] == "epm:follow-ups"


def test_an_unknown_system_prompt_gets_a_plain_answer(app_ctx):
    """A request from no known agent gets text, never a tool call."""
    answer = demo_agents.respond({"system": "You are someone else.", "messages": BRIEF}, True)
    assert _tool_calls(answer) == [] and "no script" in answer["content"][0]["text"]


# --- the second demo experiment, end to end -------------------------------------------------------

def _runs_tool_calls(agent: str, experiment_id) -> list[tuple[str, bool]]:
    """(tool, is_error) of every tool result of `agent`'s runs on the experiment, in order."""
    run_ids = list(db.session.scalars(sa.select(AgentRun.id).where(AgentRun.agent == agent,
                                                                   AgentRun.scope_id == experiment_id)))
    return [((e.metadata_ or {}).get("tool"), bool((e.metadata_ or {}).get("is_error"))) for e in db.session.scalars(
        sa.select(RunEvent).where(RunEvent.run_id.in_(run_ids), RunEvent.event_type == "tool_result")
        .order_by(RunEvent.created_at, RunEvent.seq))]


@pytest.mark.slow
def test_the_crash_and_fix_experiment_end_to_end(app, worker, live_server, demo_dirs, monkeypatch):
    """`make demo`'s second experiment through the real loop, worker, sandbox and local pods,
    with the scripted agents answering over the faithful fake Messages API: the planner reads
    probe.py and the first journey before planning `--epochs 2`; the reviewed commit crashes on
    both pods (IndexError); the orchestrator reads a crashed pod's log and sends it back to the
    implementer (a recovery, on the timeline); round 3 is reviewed and tested; two new pods run
    the fixed commit; the analyzer draws the figure with run_analysis and the clean result
    embeds it; the experiment awaits promotion."""
    from tests.integration.test_analysis import _env_built
    if not _env_built(app) and os.environ.get("CI", "") not in ("1", "true"):
        pytest.skip("the analysis environment is not built (make test builds it: scripts/analysis_env.py)")
    pods_dir = demo_dirs / "pods"
    pods_dir.mkdir(mode=0o711)
    agents = demo_agents.DemoAgents().start()
    for key, value in {"ANTHROPIC_API_KEY": "demo-scripted-agents", "ANTHROPIC_BASE_URL": agents.url,
                       "SAGAN_AGENT_MODEL": demo_agents.MODEL, "SAGAN_BASE_URL": live_server.url,
                       "SAGAN_LOCAL_PODS_DIR": str(pods_dir)}.items():
        monkeypatch.setitem(app.config, key, value)
    owner = Actor("owner")
    try:
        with app.app_context():
            assert demo_repo.ensure().on
            agents.code_stage = True
            first = demo.ensure_journey_experiment()
            experiment = experiments.get_experiment(demo.ensure_short_run_experiment())
            experiment_id, number = experiment.id, experiment.number
            effects = lifecycle.transition(experiment, "clarifying", owner, note="Start the planner.")
            db.session.commit()
            lifecycle.run_side_effects(effects)

            def settle(until, seconds):
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    worker()
                    db.session.expire_all()
                    if until():
                        return
                    watcher.watch()
                    parking.wake_ready_runs()
                    db.session.commit()
                    time.sleep(0.3)
                raise AssertionError(f"#{number} is {experiments.get_experiment(number).status}; its last notes: "
                                     + "\n".join(_experiment_notes(experiment_id)[-12:]))

            status = lambda: experiments.get_experiment(number).status  # noqa: E731
            settle(lambda: status() == "awaiting_clarifications", 60)
            effects = questions.answer(experiments.get_experiment(number), {"seeds": "Two.", "metric": "Accuracy."},
                                       owner)
            db.session.commit()
            lifecycle.run_side_effects(effects)
            settle(lambda: status() == "plan_pending", 60)

            # The planner read the code and the earlier experiment before it submitted the plan.
            planner_calls = [name for name, error in _runs_tool_calls("experiment-planner", experiment_id)
                             if not error]
            assert planner_calls[-4:] == ["repo_read_file", "search_experiments", "read_experiment", "submit_plan"]
            experiment = experiments.get_experiment(number)
            assert f"#{first} is the closest earlier experiment" in experiment.plan_md
            approval = db.session.scalar(sa.select(ApprovalRequest).where(ApprovalRequest.status == "pending"))
            effects = approvals.approve(approval, owner, answers={"anything-else": "Go."}, confirm_unchecked=True)
            db.session.commit()
            lifecycle.run_side_effects(effects)
            assert [pod["dockerArgs"] for pod in experiments.get_experiment(number).pod_spec] == \
                ["python3 probe.py --epochs 2"] * 2

            settle(lambda: status() in ("awaiting_promotion", "blocked"), 420)
            experiment = experiments.get_experiment(number)
            notes = _experiment_notes(experiment_id)
            assert experiment.status == "awaiting_promotion", "\n".join(notes[-15:])
            # Both dispatches passed their preflight (the reviewed commit on the remote, probe.py at
            # it) before any pod was made, and the result passed the completion audit before it
            # waited for the owner: its TL;DR numbers are the analysis's, the pods' latest exit 0.
            assert _verdicts(experiment_id, "epm:preflight") == ["pass", "pass"]
            assert _verdicts(experiment_id, "epm:completion-audit") == ["pass"]

            # The first dispatch crashed in the research code; the second ran the fix.
            dispatches = list(db.session.scalars(sa.select(AgentRun).where(
                AgentRun.kind == "experiment", AgentRun.scope_id == experiment_id).order_by(AgentRun.created_at)))
            assert [(d.status, d.failure_reason) for d in dispatches] == [("failed", "pod_exit_nonzero"),
                                                                           ("completed", None)]
            pods = list(db.session.scalars(sa.select(Pod).where(Pod.experiment_id == experiment_id)
                                           .order_by(Pod.created_at)))
            first_pods = [p for p in pods if p.agent_run_id == dispatches[0].id]
            # The first pod to exit 1 failed the dispatch; its survivor was stopped with it.
            assert len(first_pods) == 2 and 1 in [p.exit_code for p in first_pods]
            assert {p.status for p in first_pods} == {"stopped"}
            assert [p.exit_code for p in pods if p.agent_run_id == dispatches[1].id] == [0, 0]

            # The crash went back to the implementer: round 3, with the traceback, as a recovery.
            crash_round = db.session.scalar(sa.select(AgentRun).where(
                AgentRun.agent == "experiment-implementer", AgentRun.scope_id == experiment_id,
                AgentRun.resumes_run_id == dispatches[0].id))
            assert "Code round 3" in crash_round.request and "IndexError: list index out of range" in crash_round.request
            sent = [n for n in notes if "crashed (exit 1) with a traceback in the research code" in n]
            assert len(sent) == 1 and "code round 3" in sent[0] and "recovery 1 of 3 in 24 h" in sent[0]
            orchestrator_calls = [name for name, _ in _runs_tool_calls("experiment-orchestrator", experiment_id)]
            at = orchestrator_calls.index("send_crash_to_code")
            assert orchestrator_calls[at - 2:at] == ["list_pods", "read_pod_logs"]

            # The fixed commit: reviewed in round 3, tested, pushed, and what the second pods ran.
            verdicts = [e.metadata_ for e in db.session.scalars(sa.select(WorkflowEvent).where(
                WorkflowEvent.entity_id == experiment_id, WorkflowEvent.marker == "epm:test-verdict")
                .order_by(WorkflowEvent.created_at))]
            assert [(v["verdict"], v["round"]) for v in verdicts] == [("pass", 2), ("pass", 3)]
            assert experiment.git_commit == verdicts[-1]["commit"] != verdicts[0]["commit"]
            origin = demo_dirs / "demo-research" / "origin.git"
            assert git(f"--git-dir={origin}", "rev-parse", f"refs/heads/experiment-{number}") == experiment.git_commit
            metrics = [json.loads(a.content) for a in db.session.scalars(sa.select(Artifact).where(
                Artifact.experiment_id == experiment_id, Artifact.name.like("metrics-%")))]
            assert len(metrics) == 2 and {m["commit"] for m in metrics} == {experiment.git_commit}
            assert all(len(m["epochs"]) == 2 for m in metrics)

            # The analyzer computed and drew with run_analysis; the clean result embeds that figure.
            assert [name for name, error in _runs_tool_calls("analyzer", experiment_id) if not error] == \
                ["list_artifacts", "run_analysis", "post_marker", "write_clean_result", "search_beliefs", "set_status"]
            figure = db.session.scalar(sa.select(Artifact).where(Artifact.experiment_id == experiment_id,
                                                                 Artifact.name.like("analysis/%/accuracy-by-seed.svg")))
            assert figure is not None and figure.content_type == "image/svg+xml"
            assert 'src="data:image/svg+xml;base64,' in experiment.body and "a spread of" in experiment.body
            assert experiment.title.endswith("(LOW confidence)")
            # The clean-result critic read the write-up (get_experiment) before passing it.
            assert _runs_tool_calls("clean-result-critic", experiment_id) == [("get_experiment", False),
                                                                              ("post_marker", False)]
    finally:
        agents.stop()


def _verdicts(experiment_id, marker: str) -> list[str]:
    return [m["verdict"] for m in db.session.scalars(sa.select(WorkflowEvent.metadata_).where(
        WorkflowEvent.entity_id == experiment_id, WorkflowEvent.marker == marker).order_by(WorkflowEvent.created_at))]


def _experiment_notes(experiment_id) -> list[str]:
    return [n for n in db.session.scalars(sa.select(WorkflowEvent.note).where(
        WorkflowEvent.entity_id == experiment_id).order_by(WorkflowEvent.created_at)) if n]


# --- the demo's survey: the pod-free path ---------------------------------------------------------

def test_the_survey_planner_asks_survey_questions_and_plans_no_pods(app_ctx):
    """Does the demo planner, briefed on a survey, ask about papers and years (not seeds and
    metrics) and submit a plan with no runpod-spec that parses as a valid, pod-free plan?"""
    brief = "# Experiment #3: Survey: what sparsity schedules do recent pruning papers use?\nKind: survey.\n"
    [(name, data)] = _tool_calls(_ask("experiment-planner", [{"role": "user", "content": brief}], False))
    assert name == "ask_questions" and [q["key"] for q in data["questions"]] == ["years", "papers"]
    answered = [{"role": "user", "content": brief + "- epm:clarify-answers: years: 2023–2026; papers: ten"}]
    [(name, data)] = _tool_calls(_ask("experiment-planner", answered, False))
    assert name == "submit_plan" and "runpod-spec" not in data["markdown"]
    parsed = plans.parse(data["markdown"], kind="survey", account="local")
    assert parsed.is_plan and not parsed.problems and not parsed.data["is_blocker"], parsed.problems


def test_the_survey_goes_from_proposed_to_awaiting_promotion_without_a_pod(app, worker, demo_dirs, monkeypatch):
    """`make demo`'s survey through the real loop and worker with the scripted agents: survey
    questions, a pod-free plan, approval, the write-up, the critic, the completion audit — and
    it waits for promotion with no pod and no dispatch run."""
    agents = demo_agents.DemoAgents().start()
    for key, value in {"ANTHROPIC_API_KEY": "demo-scripted-agents", "ANTHROPIC_BASE_URL": agents.url,
                       "SAGAN_AGENT_MODEL": demo_agents.MODEL}.items():
        monkeypatch.setitem(app.config, key, value)
    owner = Actor("owner")
    try:
        with app.app_context():
            survey = experiments.create_experiment(
                {"title": "Survey: what sparsity schedules do recent pruning papers use?", "kind": "survey"}, owner)
            db.session.commit()
            experiment_id, number = survey.id, survey.number
            effects = lifecycle.transition(survey, "clarifying", owner, note="Start the planner.")
            db.session.commit()
            lifecycle.run_side_effects(effects)

            def settle(until, seconds):
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    worker()
                    db.session.expire_all()
                    if until():
                        return
                    parking.wake_ready_runs()
                    db.session.commit()
                    time.sleep(0.2)
                raise AssertionError(f"#{number} is {experiments.get_experiment(number).status}; its last notes: "
                                     + "\n".join(_experiment_notes(experiment_id)[-12:]))

            status = lambda: experiments.get_experiment(number).status  # noqa: E731
            settle(lambda: status() == "awaiting_clarifications", 60)
            effects = questions.answer(experiments.get_experiment(number),
                                       {"years": "2023–2026.", "papers": "Ten."}, owner)
            db.session.commit()
            lifecycle.run_side_effects(effects)
            settle(lambda: status() == "plan_pending", 60)
            assert experiments.get_experiment(number).pod_spec in (None, [])
            approval = db.session.scalar(sa.select(ApprovalRequest).where(ApprovalRequest.status == "pending"))
            effects = approvals.approve(approval, owner, answers={"anything-else": "Go."}, confirm_unchecked=True)
            db.session.commit()
            lifecycle.run_side_effects(effects)

            settle(lambda: status() in ("awaiting_promotion", "blocked"), 120)
            experiment = experiments.get_experiment(number)
            assert experiment.status == "awaiting_promotion", "\n".join(_experiment_notes(experiment_id)[-15:])
            assert experiment.has_clean_result
            assert _verdicts(experiment_id, "epm:completion-audit") == ["pass"]
            assert db.session.scalar(sa.select(sa.func.count(Pod.id)).where(Pod.experiment_id == experiment_id)) == 0
            assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(
                AgentRun.kind == "experiment", AgentRun.scope_id == experiment_id)) == 0
    finally:
        agents.stop()
