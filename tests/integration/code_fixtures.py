"""Fixtures for the code-agent tests: a real research repository and code-tool calls.

`research_repo` copies tests/fixtures/research_repo (a tiny Python project whose test
fails) into a fresh git repository, makes a bare `origin` of it that Sagan is configured to
use (SAGAN_ALLOW_LOCAL_REPO is on in tests), and points the worktrees at a folder of its
own. Everything lives in one /tmp folder of mode 0711: sandboxed commands and local pods run
as `nobody` when the suite runs as root, and must be able to walk down to what they use.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from models import db
from services.agents import toolbox, toolkit
from services.code import system_users
from services.core import settings
from services.workflow import experiments, runs

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "research_repo"
TEST_COMMAND = "python3 -m unittest -v"
LINT_COMMAND = "python3 -m tabnanny ."


def _trusting_env() -> dict:
    """The test's own git trusts every repository (the origin may belong to `nobody`); a global
    config file, since `-c` does not reach the upload-pack a local clone starts."""
    config = Path(tempfile.gettempdir()) / "sagan-tests-gitconfig"
    if not config.exists():
        config.write_text("[safe]\n\tdirectory = *\n")
    return {**os.environ, "GIT_CONFIG_GLOBAL": str(config)}


def git(*args: str, cwd=None) -> str:
    """Run git as the test (with an identity and every repository trusted); its stdout."""
    result = subprocess.run(["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args],
                            cwd=cwd, capture_output=True, text=True, env=_trusting_env())
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@dataclass
class ResearchRepo:
    base: Path
    origin: Path
    workspaces: Path

    def origin_sha(self, branch: str) -> str | None:
        """The commit `branch` points at in the remote, or None when the remote has no such branch."""
        result = subprocess.run(["git", f"--git-dir={self.origin}", "rev-parse", "--verify", "--quiet",
                                 f"refs/heads/{branch}"], capture_output=True, text=True, env=_trusting_env())
        return result.stdout.strip() or None

    def worktree(self, number: int) -> Path:
        found = list(self.workspaces.glob(f"*/experiment-{number}"))
        assert found, f"no worktree for #{number} under {self.workspaces}"
        return found[0]


@pytest.fixture
def research_repo(app, monkeypatch):
    """The configured research repository: main has stats.py (buggy) and test_stats.py (failing)."""
    base = Path(tempfile.mkdtemp(prefix="sagan-code-", dir="/tmp"))
    os.chmod(base, 0o711)
    src = base / "src"
    shutil.copytree(FIXTURE, src)
    git("init", "--quiet", "--initial-branch=main", cwd=src)
    git("add", "--all", cwd=src)
    git("commit", "--quiet", "-m", "Tiny research project", cwd=src)
    origin = base / "origin.git"
    git("clone", "--quiet", "--bare", str(src), str(origin))
    pod_user = system_users.ensure_user(app.config["SAGAN_LOCAL_POD_USER"])  # None unless root
    if pod_user is not None:
        # Owned by the local pods' user, as services/code/demo_repo.py does for the demo.
        for folder, dirs, files in os.walk(origin):
            for name in [folder] + [os.path.join(folder, n) for n in dirs + files]:
                os.chown(name, pod_user.pw_uid, pod_user.pw_gid)
    workspaces = base / "workspaces"
    monkeypatch.setitem(app.config, "SAGAN_WORKSPACES_DIR", str(workspaces))
    with app.app_context():
        settings.put("research_repo_url", str(origin))
        settings.put("research_repo_branch", "main")
        settings.put("research_repo_test_command", TEST_COMMAND)
        settings.put("research_repo_lint_command", LINT_COMMAND)
        db.session.commit()
    yield ResearchRepo(base, origin, workspaces)
    shutil.rmtree(base, ignore_errors=True)


def tool_context(number: int, agent: str = "experiment-implementer") -> toolkit.ToolContext:
    """A run of `agent` on experiment #number, as the loop would hand to a tool (in an app context)."""
    experiment = experiments.get_experiment(number)
    run = runs.create_run(kind="apply", agent=agent, request="test", scope_id=experiment.id)
    db.session.commit()
    return toolkit.ToolContext(run, experiment)


def call(ctx: toolkit.ToolContext, name: str, **data) -> toolkit.ToolResult:
    """Call one tool the way the loop does, and commit what it wrote."""
    result = toolbox.call(ctx, name, data)
    db.session.commit()
    return result
