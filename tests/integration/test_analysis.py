"""run_analysis: real bubblewrap sandboxes with the analysis environment
(scripts/analysis_env.py), the experiment's artifacts read-only, output files kept as
artifacts; and its bad input — loops forever, writes too much, tries the network, reads
outside its mounts."""
from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import threading
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import Artifact, Figure, Pod, db
from services.agents import toolbox, toolkit
from services.code import sandbox
from services.dispatch import progress
from tests.integration.code_fixtures import tool_context
from tests.integration.test_research_tools import add_pod

CI = os.environ.get("CI", "") in ("1", "true")


def _env_built(app) -> bool:
    return (Path(app.config["SAGAN_ANALYSIS_ENV"]) / ".sagan-analysis-env").is_file()


@pytest.fixture
def analysis(app, make_experiment, monkeypatch):
    """An experiment with two pods' metrics, and a context of its analyzer run."""
    if shutil.which("bwrap") is None and not CI:
        pytest.skip("bubblewrap is not installed (make test installs it on Debian)")
    if not _env_built(app) and not CI:
        pytest.skip("the analysis environment is not built (make test builds it: scripts/analysis_env.py)")
    monkeypatch.setitem(app.config, "SAGAN_ANALYSIS_TIMEOUT_SECONDS", 60)
    with app.app_context():
        number = make_experiment("Two seeds")
        pod = add_pod(number)
        progress.store_artifact(pod, "seed-1/metrics.csv", b"step,loss\n1,3.0\n2,2.4\n3,2.1\n", None)
        progress.store_artifact(pod, "seed-2/metrics.csv", b"step,loss\n1,3.1\n2,2.5\n3,2.2\n", None)
        db.session.commit()
        yield number, tool_context(number, "analyzer")


def run(ctx, code: str, **extra) -> toolkit.ToolResult:
    result = toolbox.call(ctx, "run_analysis", {"code": code, **extra})
    db.session.commit()
    return result


def _artifacts(number: int) -> list[Artifact]:
    from services.workflow import experiments
    experiment = experiments.get_experiment(number)
    return list(db.session.scalars(sa.select(Artifact).where(Artifact.experiment_id == experiment.id)
                                   .order_by(Artifact.name)))


FIGURE = '''
import os
import numpy as np, pandas as pd, scipy.stats as st
import matplotlib.pyplot as plt
frames = [pd.read_csv(f"/artifacts/seed-{s}/metrics.csv") for s in (1, 2)]
final = np.array([f["loss"].iloc[-1] for f in frames])
t = st.ttest_1samp(final, 2.0)
print(f"final losses {final.tolist()} mean {final.mean():.2f} p={t.pvalue:.3f}")
fig, ax = plt.subplots(figsize=(4, 3), dpi=60)
for s, f in zip((1, 2), frames):
    ax.plot(f["step"], f["loss"], label=f"seed {s}")
ax.legend()
fig.savefig("loss.png")
fig.savefig(os.path.join(os.environ["OUTPUT"], "loss.svg"))
pd.DataFrame({"seed": [1, 2], "final": final}).to_csv("summary.csv", index=False)
'''


def test_an_analysis_reads_artifacts_computes_and_its_figures_become_artifacts(app, analysis, client, owner):
    number, ctx = analysis
    with app.app_context():
        result = run(ctx, FIGURE)
        assert not result.is_error, result.content
        assert "final losses [2.1, 2.2] mean 2.15" in result.content and "[exit 0 after" in result.content
        names = [a.name for a in _artifacts(number) if a.name.startswith("analysis/")]
        assert len(names) == 3 and {n.rsplit("/", 1)[1] for n in names} == {"loss.png", "loss.svg", "summary.csv"}
        png_name = next(n for n in names if n.endswith(".png"))
        assert f"- {png_name} (image/png" in result.content and 'artifact:NAME' in result.content
        # The model sees the PNG it drew; both figures are result figures now.
        content = result.api_content()
        assert content[1]["type"] == "image" and content[1]["source"]["media_type"] == "image/png"
        kinds = sorted(f.kind for f in db.session.scalars(sa.select(Figure)))
        assert kinds == ["image", "svg"]
        listing = json.loads(toolbox.call(ctx, "list_artifacts", {}).content)
        assert {a["pod"] for a in listing if a["name"].startswith("analysis/")} == {"(analysis)"}

        # The analyzer embeds the figure it drew.
        saved = toolbox.call(ctx, "write_clean_result", {"html": f'<p>Results: seeds agree.</p><img src="artifact:{png_name}">'})
        assert not saved.is_error, saved.content
        db.session.commit()
    page = client.get(f"/experiments/{number}")  # the owner's page lists the analysis's files
    assert page.status_code == 200 and png_name in page.text


def test_code_that_loops_forever_is_killed_at_the_limit_and_keeps_nothing(app, analysis):
    number, ctx = analysis
    with app.app_context():
        before = len(_artifacts(number))
        result = run(ctx, "open('/output/partial.txt', 'w').write('x')\nwhile True:\n    pass\n", timeout_seconds=3)
        assert result.is_error
        assert "still running after the 3 s timeout; the sandbox was killed" in result.content
        assert "No files were kept." in result.content
        assert len(_artifacts(number)) == before


def test_code_that_writes_too_much_fails_with_a_clear_error(app, analysis, monkeypatch):
    number, ctx = analysis
    monkeypatch.setitem(app.config, "SAGAN_ANALYSIS_OUTPUT_MB", 2)
    with app.app_context():
        before = len(_artifacts(number))
        result = run(ctx, "with open('big.txt', 'wb') as f:\n    for _ in range(100):\n        f.write(b'x' * 1_000_000)\n")
        assert result.is_error
        assert "No space left on device" in result.content and "more than the output folder holds (2 MB)" in result.content
        assert "[exit 1" in result.content and "No files were kept." in result.content
        assert len(_artifacts(number)) == before  # a failed analysis changes nothing


def test_code_that_prints_too_much_is_stopped_at_the_output_cap(app, analysis, monkeypatch):
    number, ctx = analysis
    monkeypatch.setitem(app.config, "SAGAN_SANDBOX_OUTPUT_BYTES", 10_000)
    monkeypatch.setitem(app.config, "SAGAN_ANALYSIS_OUTPUT_MB", 1)
    with app.app_context():
        before = len(_artifacts(number))
        result = run(ctx, "open('kept.txt', 'w').write('x')\nwhile True:\n    print('y' * 1000)\n")
        assert result.is_error and "output passed the cap of 10,000 bytes" in result.content
        assert "No files were kept." in result.content and len(_artifacts(number)) == before


def test_code_past_the_memory_limit_fails_and_keeps_nothing(app, analysis, monkeypatch):
    number, ctx = analysis
    monkeypatch.setitem(app.config, "SAGAN_SANDBOX_MEMORY_MB", 1024)
    with app.app_context():
        before = len(_artifacts(number))
        result = run(ctx, "import numpy as np\nopen('half.txt', 'w').write('x')\nbig = np.ones(4 * 1024**3 // 8)\n")
        assert result.is_error and "MemoryError" in result.content and "No files were kept." in result.content
        assert len(_artifacts(number)) == before


def test_code_that_tries_the_network_gets_no_network(app, analysis):
    _, ctx = analysis
    with app.app_context():
        result = run(ctx, "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=5)\n")
        assert result.is_error and "Network is unreachable" in result.content
        assert "There is no network in the analysis sandbox" in result.content
        named = run(ctx, "import urllib.request\nurllib.request.urlopen('https://example.com', timeout=5)\n")
        assert named.is_error and ("Temporary failure in name resolution" in named.content
                                   or "Network is unreachable" in named.content)


def test_code_cannot_read_outside_its_mounts_or_write_the_artifacts(app, analysis):
    number, ctx = analysis
    with app.app_context():
        secret_file = Path(app.config["SAGAN_WORKSPACES_DIR"]).parent / "secret_key"
        probes = [str(Path(__file__).resolve()), "/etc/shadow", str(Path(app.root_path) / "config.py"),
                  str(secret_file), "/root/.bashrc"]
        code = ("import os\nfor path in %r:\n    try:\n        open(path).read(1)\n        print('READ', path)\n"
                "    except OSError as exc:\n        print('NO', path, type(exc).__name__)\n"
                "try:\n    open('/artifacts/seed-1/metrics.csv', 'a').write('tampered')\n    print('WROTE')\n"
                "except OSError as exc:\n    print('READ-ONLY', type(exc).__name__)\n"
                "print('ENV', sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k or 'DATABASE' in k))\n" % probes)
        result = run(ctx, code)
        assert "READ " not in result.content.replace("READ-ONLY", ""), result.content
        assert "WROTE" not in result.content and "READ-ONLY" in result.content
        assert "ENV []" in result.content  # none of Sagan's secrets or settings
        original = next(a for a in _artifacts(number) if a.name == "seed-1/metrics.csv")
        assert b"tampered" not in original.content


def test_bad_input_is_a_clear_error(app, analysis, monkeypatch):
    _, ctx = analysis
    with app.app_context():
        for data, message in (({"code": "  "}, "Give the Python code"), ({}, "Missing required input: code"),
                              ({"code": "x", "timeout_seconds": "9"}, "timeout_seconds must be integer"),
                              ({"code": "x" * 100_001}, "code is too long")):
            result = toolbox.call(ctx, "run_analysis", data)
            assert result.is_error and message in result.content, result.content
        monkeypatch.setitem(app.config, "SAGAN_ANALYSIS_ENV", "/nonexistent/analysis-env")
        missing = toolbox.call(ctx, "run_analysis", {"code": "print(1)"})
        assert missing.is_error and "scripts/analysis_env.py" in missing.content


def test_two_pods_files_of_one_name_appear_under_each_pods_name(app, analysis):
    number, ctx = analysis
    with app.app_context():
        first = db.session.scalar(sa.select(Pod).where(Pod.name == f"sagan-{number}-a-0-1"))
        second = Pod(id=uuid.uuid4(), agent_run_id=first.agent_run_id, experiment_id=first.experiment_id,
                     account="local", name=f"sagan-{number}-a-1-1", status="running")
        db.session.add(second)
        db.session.flush()
        progress.store_artifact(first, "final.json", b'{"loss": 2.1}', None)
        progress.store_artifact(second, "final.json", b'{"loss": 2.2}', None)
        db.session.commit()
        result = run(ctx, "import json, os\nfor pod in sorted(os.listdir('/artifacts')):\n"
                          "    path = f'/artifacts/{pod}/final.json'\n"
                          "    if os.path.isfile(path):\n        print(pod, json.load(open(path))['loss'])\n"
                          "print(sorted(os.listdir('/artifacts/seed-1')))\n")
        assert not result.is_error, result.content
        assert f"sagan-{number}-a-0-1 2.1" in result.content and f"sagan-{number}-a-1-1 2.2" in result.content
        assert "['metrics.csv']" in result.content  # unique names stay where they were


# Forks until the process limit refuses; each child becomes a `sleep`, away from the output,
# which the runner reads to its end. Then it holds them for %s s.
FORK_BOMB = """
import os, time
born = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        os.execv("/usr/bin/sleep", ["sleep", "600"])
    born += 1
print("forked", born, "as", os.getuid(), flush=True)
time.sleep(%s)
"""
# The sandbox account for these tests, so that a fork bomb never touches the account the
# host's other sandboxes use (the analyses run as BOMB_ACCOUNT-1…N).
BOMB_ACCOUNT = "sagan-bomb-test"


def _live_processes_of(prefix: str) -> list[int]:
    """Live (not zombie) processes whose real uid is an account named `prefix`…"""
    uids = {entry.pw_uid for entry in pwd.getpwall() if entry.pw_name.startswith(prefix)}
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        if int(fields["Uid"].split()[0]) in uids and not fields["State"].strip().startswith("Z"):
            found.append(int(pid))
    return found


class _ProcessCount:
    """The most live processes the accounts `prefix`… had at once while the block ran."""

    def __init__(self, prefix: str):
        self.prefix, self.seen, self._done = prefix, 0, threading.Event()

    def _watch(self):
        while not self._done.wait(0.1):
            self.seen = max(self.seen, len(_live_processes_of(self.prefix)))

    def __enter__(self):
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()


@pytest.fixture
def bounded_bombs(app, monkeypatch):
    """Fork bombs bounded for a shared 2-core test machine (256 processes, not 1,024), on
    accounts of the tests' own."""
    if os.geteuid() != 0:
        pytest.skip("accounts of their own need root (as in production); as another user every sandbox is ours")
    monkeypatch.setattr(sandbox, "PROCESS_LIMIT", 256)
    monkeypatch.setitem(app.config, "SAGAN_SANDBOX_USER", BOMB_ACCOUNT)


def test_a_fork_bomb_leaves_nothing_behind_and_the_next_analysis_runs_at_once(app, analysis, bounded_bombs):
    """Does an analysis that forks until the process limit and is killed at its timeout return
    only once every one of its processes is gone, so that the next analysis starts at once
    (it failed with "Creating new namespace failed" while the kernel was still killing them)?"""
    _, ctx = analysis
    most = _ProcessCount(BOMB_ACCOUNT)
    with app.app_context(), most:
        bombed = run(ctx, FORK_BOMB % 600, timeout_seconds=20)
        assert bombed.is_error and "still running after the 20 s timeout" in bombed.content, bombed.content
        assert _live_processes_of(BOMB_ACCOUNT) == []
        assert most.seen >= 0.9 * sandbox.PROCESS_LIMIT  # it did fill its limit before the timeout
        after = run(ctx, "print('the next analysis runs')")
        assert not after.is_error and "the next analysis runs" in after.content, after.content


def test_two_analyses_at_once_each_have_their_own_process_limit(app, analysis, bounded_bombs):
    """While one analysis holds every process its limit allows, does another one, started then,
    run normally — as a different account, whose processes count on their own?"""
    number, _ = analysis
    bombed: dict = {}

    def bomb():
        with app.app_context():
            bombed["result"] = run(tool_context(number, "analyzer"), FORK_BOMB % 10, timeout_seconds=60)

    thread = threading.Thread(target=bomb)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(_live_processes_of(BOMB_ACCOUNT)) < 0.9 * sandbox.PROCESS_LIMIT and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_live_processes_of(BOMB_ACCOUNT)) >= 0.9 * sandbox.PROCESS_LIMIT, "the bomb never filled its limit"
        with app.app_context():
            calm = run(tool_context(number, "analyzer"), "import os\nprint('calm as', os.getuid())")
        assert not calm.is_error and "calm as" in calm.content, calm.content
    finally:
        thread.join(90)
    result = bombed["result"]
    assert not result.is_error and re.search(r"forked 2\d\d as", result.content), result.content
    bomb_uid = result.content.split("forked", 1)[1].split("as", 1)[1].split()[0]
    calm_uid = calm.content.split("calm as", 1)[1].split()[0]
    assert bomb_uid != calm_uid


def test_unready_artifacts_are_not_mounted_and_outputs_keep_to_the_budget(app, analysis, monkeypatch):
    """A pod's 600 KB log still waiting for the artifacts job is not under /artifacts (its content
    is not redacted yet) and is named; with the experiment's count budget full after one more
    file, is the second output file skipped with the budget's sentence and nothing else lost?"""
    number, ctx = analysis
    with app.app_context():
        pod = db.session.scalar(sa.select(Pod))
        progress.store_artifact(pod, "train.log", b"loss 0.5\n" * 70_000, None)
        db.session.commit()
        monkeypatch.setitem(app.config, "ARTIFACT_EXPERIMENT_MAX_COUNT", 4)
        result = run(ctx, "import os\nprint(sorted(os.listdir('/artifacts')))\n"
                          "open('a.csv', 'w').write('x\\n1\\n')\nopen('b.csv', 'w').write('x\\n2\\n')\n")
        assert not result.is_error, result.content
        assert "['seed-1', 'seed-2']" in result.content
        assert "Not under /artifacts (still being processed, or failed" in result.content
        assert "train.log" in result.content
        kept = [a.name for a in _artifacts(number) if a.name.startswith("analysis/")]
        assert len(kept) == 1 and kept[0].endswith("/a.csv")
        assert "b.csv: This experiment has stored 4 artifacts" in result.content
