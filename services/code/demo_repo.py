"""The tiny research repository `make demo` hands its scripted code agents.

The demo journey's probe lives in three files: `probe.py` is what each pod runs (eight
epochs, progress posted to Sagan, a metrics JSON and an SVG chart written as artifacts),
`stats.py` summarises the epochs, and `test_stats.py` tests it. `stats.mean` starts out with
a bug its test catches (it divides by n + 1), so the demo's implementer has something real
to fix, the reviewer something to ask for (an empty input), and the test step something to
run — in the same bubblewrap sandbox real agents get.

`ensure` builds it once as a local git repository with a bare `origin` under the instance
folder and points the research-repository settings at that origin. It stays out of the way
of real work: nothing happens when another repository is configured, and nothing happens
(with the reason said) when this host cannot run the sandbox.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from flask import current_app

from services.code import sandbox, system_users, workspaces
from services.core import settings
from services.core.errors import SaganError

BRANCH = "main"
TEST_COMMAND = "python3 -m unittest -v"
LINT_COMMAND = "python3 -m compileall -q ."

BUGGY_STATS = '''"""Summaries of the probe's per-epoch accuracies."""


def mean(values):
    """The arithmetic mean of a sequence of numbers."""
    total = 0.0
    for value in values:
        total += value
    return total / (len(values) + 1)
'''

# Round 1 of the demo's implementer: the division the test catches.
FIXED_STATS = BUGGY_STATS.replace("(len(values) + 1)", "len(values)")

# Round 2: the reviewer's targeted fix, as a model would send it (one patch, two files).
EMPTY_INPUT_PATCH = "\n".join([
    "--- a/stats.py", "+++ b/stats.py", "@@ -3,6 +3,8 @@", " ",
    " def mean(values):",
    '     """The arithmetic mean of a sequence of numbers."""',
    "+    if not values:",
    '+        raise ValueError("mean() of no values")',
    "     total = 0.0",
    "     for value in values:",
    "         total += value",
    "--- a/test_stats.py", "+++ b/test_stats.py", "@@ -9,6 +9,10 @@ class MeanTest(unittest.TestCase):",
    "     def test_one_value_is_its_own_mean(self):",
    "         self.assertEqual(mean([0.5]), 0.5)",
    " ",
    "+    def test_no_values_is_an_error(self):",
    "+        with self.assertRaises(ValueError):",
    "+            mean([])",
    "+",
    " ",
    ' if __name__ == "__main__":',
    "     unittest.main()",
    "",
])
REVIEW_FIX = "mean([]) divides by zero: raise ValueError for no values, and add a test for it."

TEST_STATS = '''import unittest

from stats import mean

try:  # the pod bootstrap puts Sagan's metrics helper on PYTHONPATH
    import sagan_metrics
except ImportError:
    sagan_metrics = None


class MeanTest(unittest.TestCase):
    def test_mean_of_three_accuracies(self):
        self.assertAlmostEqual(mean([0.8, 0.9, 1.0]), 0.9)

    def test_one_value_is_its_own_mean(self):
        self.assertEqual(mean([0.5]), 0.5)


if __name__ == "__main__":
    unittest.main()
'''

PROBE = '''"""One seed of the probe: eight epochs, progress posted to Sagan, metrics and a chart written.

Run on a pod by Sagan's bootstrap (which sets SAGAN_* variables); runs anywhere without them.
`python3 probe.py --epochs N` trains for N epochs instead of eight.
"""
import argparse
import json
import math
import os
import random
import time
import urllib.request

from stats import mean

try:  # the pod bootstrap puts Sagan's metrics helper on PYTHONPATH
    import sagan_metrics
except ImportError:
    sagan_metrics = None

EPOCHS = 8
STEPS_PER_EPOCH = 200
SECONDS_PER_EPOCH = 1.5  # slow enough to watch the progress bar move


def post_progress(percent, message, seq, metrics):
    url, token = os.environ.get("SAGAN_PROGRESS_URL"), os.environ.get("SAGAN_POD_PROGRESS_TOKEN")
    if not url or not token:
        print(message)
        return
    body = json.dumps({"progressPct": percent, "message": message, "seq": seq, "metrics": metrics}).encode()
    request = urllib.request.Request(url, data=body, headers={
        "Authorization": "Bearer " + token, "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).close()


def chart(seed, accuracies):
    """A bar per epoch with its value, on axes: accuracy from 0.70 to 1.00 against the epoch."""
    low, high, left, top, width, height = 0.70, 1.00, 44, 24, 264, 140
    def y(value):
        return top + height * (high - max(low, min(high, value))) / (high - low)
    grid = "".join(
        f'<line x1="{left}" x2="{left + width}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#8888" />'
        f'<text x="{left - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{t:.2f}</text>'
        for t in (0.70, 0.80, 0.90, 1.00))
    slot = width / len(accuracies)
    bars = "".join(
        f'<rect x="{left + i * slot + slot * 0.15:.1f}" y="{y(a):.1f}" width="{slot * 0.7:.1f}" '
        f'height="{top + height - y(a):.1f}" fill="#4263eb">'
        f"<title>seed {seed}, epoch {i + 1}: accuracy {a:.3f}</title></rect>"
        f'<text x="{left + (i + 0.5) * slot:.1f}" y="{y(a) - 4:.1f}" text-anchor="middle">{a:.2f}</text>'
        f'<text x="{left + (i + 0.5) * slot:.1f}" y="{top + height + 16}" text-anchor="middle">{i + 1}</text>'
        for i, a in enumerate(accuracies))
    labels = (f'<text x="{left + width / 2}" y="{top + height + 34}" text-anchor="middle">epoch</text>'
              f'<text x="12" y="{top + height / 2}" text-anchor="middle" '
              f'transform="rotate(-90 12 {top + height / 2})">accuracy</text>'
              f'<text x="{left}" y="14">Seed {seed}: validation accuracy per epoch</text>')
    return ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 320 204" role="img" '
            'font-family="sans-serif" font-size="10" fill="#777">'
            f"{grid}{bars}{labels}</svg>")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="One seed of the probe.")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help=f"epochs to train (default {EPOCHS})")
    return parser.parse_args(argv)


def main():
    epochs = parse_args().epochs
    seed = int(os.environ.get("SAGAN_RUN_INDEX", "0"))
    out = os.environ.get("SAGAN_ARTIFACT_DIR", "artifacts")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(seed)
    accuracies = []
    for epoch in range(1, epochs + 1):
        accuracies.append(round(0.78 + 0.018 * epoch + rng.uniform(-0.01, 0.01), 4))
        if sagan_metrics is not None:  # curves for the experiment page's charts
            for step in range((epoch - 1) * STEPS_PER_EPOCH, epoch * STEPS_PER_EPOCH):
                sagan_metrics.log(step, loss=0.45 + 1.6 * math.exp(-step / 400) + rng.gauss(0, 0.03))
            sagan_metrics.log(epoch * STEPS_PER_EPOCH, {"val/accuracy [%]": 100 * accuracies[-1]})
            sagan_metrics.flush()
        post_progress(10 + 80 * epoch // epochs, f"seed {seed}: epoch {epoch}/{epochs}", 100 + epoch,
                      {"accuracy": accuracies[-1]})
        time.sleep(SECONDS_PER_EPOCH)
    final = round(mean(accuracies[-3:]), 4)  # the last three epochs, so one noisy epoch does not decide
    gain = round(accuracies[-1] - accuracies[-4], 4)  # what the last three epochs added
    metrics = {"seed": seed, "accuracy": final, "gain": gain, "epochs": accuracies,
               "commit": os.environ.get("SAGAN_GIT_COMMIT", "")}
    with open(os.path.join(out, f"metrics-{seed}.json"), "w") as handle:
        json.dump(metrics, handle)
    with open(os.path.join(out, f"accuracy-{seed}.svg"), "w") as handle:
        handle.write(chart(seed, accuracies))
    print(f"seed {seed}: accuracy {final}")


if __name__ == "__main__":
    main()
'''

# The demo's second experiment runs `probe.py --epochs 2`: the gain over the last three epochs
# reads accuracies[-4], which a two-epoch run does not have (IndexError on the pod). The fix
# its implementer makes after the crash comes back to the code:
FIXED_PROBE = PROBE.replace(
    "gain = round(accuracies[-1] - accuracies[-4], 4)  # what the last three epochs added",
    "# what the last three epochs added (all of them in a shorter run)\n"
    "    gain = round(accuracies[-1] - accuracies[max(len(accuracies) - 4, 0)], 4)")
SHORT_RUN_EPOCHS = 2

FILES = {
    "README.md": "# Probe (Sagan demo)\n\nThe research repository `make demo` creates for its scripted agents. "
                 "`python3 probe.py` runs one seed; `python3 -m unittest -v` runs the tests.\n",
    # A notice for whoever finds the folder; Sagan tells its demo repository by its URL.
    "SAGAN_DEMO_REPOSITORY": "This repository was made by Sagan's `make demo`; its scripted agents may change it.\n",
    ".gitignore": "__pycache__/\nartifacts/\n",
    "stats.py": BUGGY_STATS,
    "test_stats.py": TEST_STATS,
    "probe.py": PROBE,
}


@dataclass(frozen=True)
class CodeStage:
    """Whether the demo's code-writing stage can run here, and why (or why not)."""

    on: bool
    reason: str

    def line(self) -> str:
        return f"Code-writing stage: {'on' if self.on else 'off'} — {self.reason}"


def folder() -> Path:
    return Path(current_app.config["SAGAN_DEMO_REPO_DIR"])


def origin_path() -> Path:
    return folder() / "origin.git"


def _git(*args: str, cwd: Path) -> None:
    # Neither the user's nor the system's git config: no hooks, no signing, a fixed identity.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "LANG": "C.UTF-8",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0"}
    result = subprocess.run(["git", "-c", "user.name=Sagan demo", "-c", "user.email=demo@sagan.invalid",
                             "-c", "commit.gpgSign=false", "-c", "core.hooksPath=/dev/null", *args],
                            cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise SaganError(f"git {args[0]} failed: {(result.stderr or result.stdout).strip()[-500:]}")


def _why_not() -> str | None:
    """Why this host cannot run the code-writing stage, or None when it can.

    Installed is not enough: bubblewrap also needs unprivileged user namespaces, which some
    hosts turn off. So one harmless command runs in a real sandbox first, and a demo that
    would stop half-way with a blocked experiment says why at start-up instead.
    """
    if not shutil.which("git"):
        return "git is not installed (Debian/Ubuntu: `apt-get install git`)."
    try:
        sandbox.check_available()
        if sandbox.sandbox_user() is not None:
            workspaces.check_reachable(workspaces.root())
            workspaces.check_reachable(origin_path())
        probe = Path(tempfile.mkdtemp(prefix="sagan-sandbox-probe-"))
        try:
            os.chmod(probe, 0o755)  # the sandbox user mounts it
            outcome = sandbox.run(probe, ["true"], writable=False,
                                  limits=sandbox.Limits.from_config(timeout=20))
        finally:
            shutil.rmtree(probe, ignore_errors=True)
    except SaganError as exc:
        return exc.message
    if not outcome.ok:
        return (f"bubblewrap is installed but could not start a sandbox here ({outcome.status_line()} "
                f"{outcome.tail(300).strip()}); hosts that disable unprivileged user namespaces need "
                "them enabled (sysctl kernel.unprivileged_userns_clone=1, or an AppArmor profile for bwrap).")
    return None


def _build(base: Path) -> None:
    """src/ with one commit of FILES, and origin.git, a bare clone of it that Sagan pushes to."""
    if base.exists():
        shutil.rmtree(base)  # a half-built repository from an interrupted start
    src = base / "src"
    src.mkdir(parents=True)
    os.chmod(base, 0o755)
    for name, text in FILES.items():
        (src / name).write_text(text, encoding="utf-8")
    _git("init", "--quiet", f"--initial-branch={BRANCH}", cwd=src)
    _git("add", "--all", cwd=src)
    _git("commit", "--quiet", "-m", "The probe, with a bug in mean()", cwd=src)
    _git("clone", "--quiet", "--bare", str(src), str(base / "origin.git"), cwd=base)
    # Local pods run as SAGAN_LOCAL_POD_USER when Sagan is root, and git will not serve them a
    # repository another account owns; Sagan's own pushes trust this one path (workspaces).
    account = system_users.ensure_user(current_app.config["SAGAN_LOCAL_POD_USER"])  # None unless root
    if account is not None:
        for root, dirs, files in os.walk(base / "origin.git"):
            for name in [root] + [os.path.join(root, n) for n in dirs + files]:
                os.chown(name, account.pw_uid, account.pw_gid)


def ensure() -> CodeStage:
    """Build the demo repository (once) and configure it, when this host can run the code stage.

    Off, with the reason, when another research repository is configured (the scripted
    agents never touch real code) or when the sandbox cannot run here.
    """
    origin = origin_path()
    configured = settings.get("research_repo_url")
    if configured and configured != str(origin):
        return CodeStage(False, f"a research repository is configured ({configured}); the scripted agents "
                                "leave it alone and the pods run the plan's script directly.")
    reason = _why_not()
    if reason:
        return CodeStage(False, f"{reason} Without it the pods run the plan's script directly.")
    if not (origin / "HEAD").exists():
        _build(folder())
    values = {"research_repo_url": str(origin), "research_repo_branch": BRANCH,
              "research_repo_test_command": TEST_COMMAND, "research_repo_lint_command": LINT_COMMAND}
    for key, value in values.items():
        if settings.get(key) != value:
            settings.put(key, value)
    return CodeStage(True, f"the scripted implementer and reviewers work on the demo repository {origin}.")
