"""The path rules, numbered view and clip the worktree tools and the repository tools share
(services/agents/file_tool_rules.py): pure functions, no database."""
from __future__ import annotations

import pytest

from services.agents.file_tool_rules import PathRefused, clip_middle, numbered_lines, path_parts
from services.agents.repo_tools import clean_path
from services.core.errors import ValidationError


@pytest.mark.parametrize("raw, reason", [
    ("a\x00b", "NUL"),
    ("/etc/passwd", "absolute path"),
    ("~/.ssh/id_rsa", "absolute path"),
    ("\\\\server\\share", "absolute path"),
    ("src/../../etc", "contains '..'"),
    ("..", "contains '..'"),
    (".git/config", "git metadata"),
    ("sub/.git/hooks/pre-commit", "git metadata"),
    ("", "relative to the repository root"),
    ("./", "relative to the repository root"),
])
def test_both_families_refuse_the_same_paths_for_the_same_reason(raw, reason):
    """Is every path the worktree tools refuse also refused by the repository tools, saying why?"""
    with pytest.raises(PathRefused) as worktree:
        path_parts(raw, place="worktree", git_hint="use git_diff.")
    with pytest.raises(PathRefused) as repository:
        clean_path(raw)
    assert reason in worktree.value.message and reason in repository.value.message
    assert worktree.value.code == repository.value.code == "path_refused"


def test_the_place_and_the_git_hint_are_the_callers():
    with pytest.raises(PathRefused) as refused:
        path_parts("a/../b", place="worktree", git_hint="x")
    assert "cannot leave the worktree" in refused.value.message
    with pytest.raises(PathRefused) as refused:
        path_parts(".git", place="repository", git_hint="use git_log and git_show for history.")
    assert refused.value.message.endswith("use git_log and git_show for history.")


def test_a_leading_dash_is_refused_only_where_git_would_read_an_option():
    assert path_parts("-notes.txt", place="worktree", git_hint="x") == ("-notes.txt",)
    with pytest.raises(PathRefused, match="starts with '-'"):
        clean_path("--output=/tmp/x")


def test_the_root_only_when_allowed():
    assert path_parts(".", place="worktree", git_hint="x", allow_root=True) == ()
    assert clean_path("./", allow_root=True) == ""
    assert clean_path(" src//train.py ") == "src/train.py"


LINES = [f"line {n}" for n in range(1, 13)]


def test_numbered_lines_shows_a_range_with_aligned_numbers():
    view = numbered_lines("a.py", LINES, 9, 11)
    assert view.splitlines() == ["a.py (lines 9-11 of 12)", " 9| line 9", "10| line 10", "11| line 11"]


def test_numbered_lines_cuts_an_end_past_the_file_and_refuses_a_start_past_it():
    assert numbered_lines("a.py", LINES, 11, 500).splitlines()[0] == "a.py (lines 11-12 of 12)"
    with pytest.raises(ValidationError, match="has 12 lines; start_line 13 is past the end") as refused:
        numbered_lines("a.py", LINES, 13, None)
    assert refused.value.field == "start_line"


def test_numbered_lines_of_an_empty_file_and_the_header_prefix():
    assert numbered_lines("empty.txt", [], None, None, header_prefix="main@abc ") == "empty.txt (empty)\n"
    assert numbered_lines("a.py", LINES[:1], None, None, header_prefix="main@abc ").startswith(
        "main@abc a.py (lines 1-1 of 1)")


def test_clip_middle_keeps_head_and_tail():
    assert clip_middle("short", 10) == "short"
    clipped = clip_middle("A" * 50 + "B" * 50, 20)
    assert clipped.startswith("A" * 10) and clipped.endswith("B" * 10)
    assert "[80 characters cut]" in clipped
