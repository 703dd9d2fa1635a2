"""The read-only repository tools, through the real tool registry, over a
real research repository: its bare origin, Sagan's clone of it, git objects at a revision.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from models import db
from services.core import settings
from tests.integration.code_fixtures import call, git, research_repo, tool_context  # noqa: F401

TRAIN_PY = '''"""Train the model."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--learning-rate", type=float, default=0.01)
parser.add_argument("--epochs", type=int, default=3)
API_KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"
'''


def push_files(repo, files: dict, *, branch: str = "main", message: str = "More files",
               symlinks: dict | None = None) -> str:
    """Commit `files` (and symbolic links) on `branch` of the origin; the new commit's sha."""
    work = repo.base / f"push-{branch}"
    if not work.exists():
        git("clone", "--quiet", str(repo.origin), str(work))
    git("checkout", "--quiet", "-B", branch, f"origin/{branch}" if branch == "main" else "HEAD", cwd=work)
    for name, text in files.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for name, target in (symlinks or {}).items():
        os.symlink(target, work / name)
    git("add", "--all", cwd=work)
    git("commit", "--quiet", "-m", message, cwd=work)
    git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=work)
    return git("rev-parse", "HEAD", cwd=work)


@pytest.fixture
def repo(app, research_repo, monkeypatch):  # noqa: F811
    push_files(research_repo, {"src/train.py": TRAIN_PY, "configs/base.yaml": "lr: 0.01\n"},
               symlinks={"passwd": "/etc/passwd", "up": "../../outside"}, message="Add the training script")
    # Every call fetches, so the test sees what it just pushed.
    monkeypatch.setattr("services.code.workspaces.MIRROR_FETCH_INTERVAL", 1)
    return research_repo


def _ctx(app, make_experiment, agent="experiment-planner"):
    number = make_experiment("Does a lower learning rate help?")
    return number, tool_context(number, agent)


def test_list_read_search_and_log_read_the_default_branch_with_line_numbers(app, repo, make_experiment):
    with app.app_context():
        _, ctx = _ctx(app, make_experiment)
        listing = call(ctx, "repo_list_files")
        assert not listing.is_error, listing.content
        assert "src/train.py" in listing.content and "configs/" in listing.content
        assert "passwd -> /etc/passwd (symbolic link; not followed)" in listing.content
        assert "[main @" in listing.content

        read = call(ctx, "repo_read_file", path="src/train.py", start_line=4, end_line=6)
        assert not read.is_error, read.content
        assert '5| parser.add_argument("--learning-rate", type=float, default=0.01)' in read.content
        assert "lines 4-6 of 7" in read.content

        whole = call(ctx, "repo_read_file", path="src/train.py")
        assert "sk-ant-api03" not in whole.content  # secrets in the code are redacted

        found = call(ctx, "repo_search", pattern=r"add_argument\(\"--[a-z-]+", glob="*.py")
        assert "src/train.py:5:" in found.content and "src/train.py:6:" in found.content
        assert "No matches." in call(ctx, "repo_search", pattern="nowhere_to_be_found").content
        only = call(ctx, "repo_search", pattern="lr", path="configs")
        assert "configs/base.yaml:1: lr: 0.01" in only.content and "train.py" not in only.content

        log = call(ctx, "git_log")
        assert "Add the training script" in log.content and "Tiny research project" in log.content
        sha = log.content.splitlines()[1].split()[0]
        shown = call(ctx, "git_show", commit=sha)
        assert "+parser.add_argument(\"--epochs\"" in shown.content
        assert "sk-ant-api03" not in shown.content


def test_tools_read_the_experiments_branch_once_it_has_one(app, repo, make_experiment):
    with app.app_context():
        number, ctx = _ctx(app, make_experiment)
        push_files(repo, {"src/train.py": TRAIN_PY + 'parser.add_argument("--warmup", type=int)\n'},
                   branch=f"experiment-{number}", message="Add warmup")
        read = call(ctx, "repo_read_file", path="src/train.py")
        assert f"[experiment-{number} @" in read.content and "--warmup" in read.content
        on_main = call(ctx, "repo_read_file", path="src/train.py", revision="main")
        assert "--warmup" not in on_main.content and "[main @" in on_main.content


def test_the_branch_set_on_the_experiment_comes_first(app, repo, make_experiment):
    from services.workflow import experiments
    with app.app_context():
        number, ctx = _ctx(app, make_experiment)
        push_files(repo, {"owner.txt": "the owner's branch\n"}, branch="owner-fix", message="Owner's fix")
        push_files(repo, {"loop.txt": "the loop's branch\n"}, branch=f"experiment-{number}", message="Loop")
        experiments.get_experiment(number).git_branch = "owner-fix"
        db.session.commit()
        ctx = tool_context(number, "experiment-planner")
        listing = call(ctx, "repo_list_files")
        assert "[owner-fix @" in listing.content and "owner.txt" in listing.content
        assert "loop.txt" not in listing.content


def test_symbolic_links_are_shown_never_followed(app, repo, make_experiment):
    with app.app_context():
        _, ctx = _ctx(app, make_experiment)
        result = call(ctx, "repo_read_file", path="passwd")
        assert "symbolic link to '/etc/passwd'" in result.content and "root:" not in result.content
        through = call(ctx, "repo_read_file", path="passwd/x")
        assert through.is_error and "does not exist" in through.content


@pytest.mark.parametrize("tool,data,message", [
    ("repo_read_file", {"path": "../outside"}, "contains '..'"),
    ("repo_read_file", {"path": "src/../../etc/passwd"}, "contains '..'"),
    ("repo_read_file", {"path": "/etc/passwd"}, "absolute path"),
    ("repo_read_file", {"path": ".git/config"}, "git metadata"),
    ("repo_read_file", {"path": "--output=/tmp/x"}, "starts with '-'"),
    ("repo_read_file", {"path": "src/train.py", "revision": "--output=/tmp/pwned"}, "starts with '-'"),
    ("repo_read_file", {"path": "src"}, "is a folder"),
    ("repo_read_file", {"path": "missing.py"}, "does not exist"),
    ("repo_list_files", {"path": "src/train.py"}, "is a file"),
    ("repo_list_files", {"revision": "main..HEAD"}, "not a revision"),
    ("repo_list_files", {"revision": "no-such-branch"}, "no branch or commit"),
    ("repo_search", {"pattern": "x", "glob": "../*.py"}, "not a file pattern"),
    ("repo_search", {"pattern": "x", "glob": ":(top)*"}, "not a file pattern"),
    ("repo_search", {"pattern": "("}, "search failed"),
    ("git_log", {"path": "/etc"}, "absolute path"),
    ("git_show", {"commit": "--output=/tmp/pwned"}, "starts with '-'"),
    ("git_show", {"commit": "HEAD@{1}"}, "not a revision"),
    ("git_show", {"commit": "deadbeef" * 5}, "no branch or commit"),
])
def test_bad_input_is_a_clear_tool_error_and_changes_nothing(app, repo, make_experiment, tool, data, message):
    with app.app_context():
        _, ctx = _ctx(app, make_experiment)
        call(ctx, "repo_list_files")  # the clone exists before the bad call
        mirror = next(Path(repo.workspaces).glob("*/repo.git"))
        refs_before = git("--git-dir", str(mirror), "for-each-ref")
        result = call(ctx, tool, **data)
        assert result.is_error, result.content
        assert message in result.content, result.content
        assert git("--git-dir", str(mirror), "for-each-ref") == refs_before
        assert not Path("/tmp/pwned").exists() and not Path("/tmp/x").exists()


def test_a_pattern_starting_with_a_dash_is_searched_for_not_taken_as_an_option(app, repo, make_experiment):
    with app.app_context():
        _, ctx = _ctx(app, make_experiment)
        result = call(ctx, "repo_search", pattern="--epochs")
        assert not result.is_error, result.content
        assert "src/train.py:6:" in result.content


def test_without_a_research_repository_the_tools_say_where_to_configure_it(app, make_experiment):
    with app.app_context():
        assert not settings.get("research_repo_url")
        _, ctx = _ctx(app, make_experiment)
        for name, data in (("repo_list_files", {}), ("repo_read_file", {"path": "x.py"}),
                           ("repo_search", {"pattern": "x"}), ("git_log", {}), ("git_show", {"commit": "HEAD"})):
            result = call(ctx, name, **data)
            assert result.is_error and "Settings → Research repository" in result.content, (name, result.content)


def test_nothing_the_tools_do_writes_to_the_origin(app, repo, make_experiment):
    with app.app_context():
        _, ctx = _ctx(app, make_experiment)
        before = subprocess.run(["git", f"--git-dir={repo.origin}", "for-each-ref"], capture_output=True,
                                text=True).stdout
        for name, data in (("repo_list_files", {}), ("repo_read_file", {"path": "run.py"}),
                           ("repo_search", {"pattern": "mean"}), ("git_log", {}), ("git_show", {"commit": "main"})):
            assert not call(ctx, name, **data).is_error
        after = subprocess.run(["git", f"--git-dir={repo.origin}", "for-each-ref"], capture_output=True,
                               text=True).stdout
        assert before == after
