"""`sagan_state.py clean-result` and `promote` against a live server (SPEC §9.4)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.workflow import experiments

CLI = Path(__file__).resolve().parents[2] / "scripts" / "sagan_state.py"
HTML = Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html"


@pytest.fixture
def run_cli(live_server, api_client):
    """Run the CLI with a token of the given scopes; returns CompletedProcess."""
    def run(*args, scopes="read,write", stdin=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAGAN_")}
        env["SAGAN_BASE_URL"] = live_server.url
        env["SAGAN_API_TOKEN"] = api_client(scopes).secret
        return subprocess.run([sys.executable, "-I", str(CLI), *args], capture_output=True, text=True,
                              env=env, timeout=60, input=stdin)
    return run


def test_clean_result_from_a_file_and_stdin(app, run_cli, make_experiment):
    """Does `clean-result N --file` store a version and print the lint verdict; does `--file -` read stdin?"""
    number = make_experiment("Draft", status="clean_result_drafting")
    out = run_cli("clean-result", str(number), "--file", str(HTML),
                  "--title", "Curriculum changes loss by <1% (MODERATE confidence)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"#{number} clean result version 1; lint passed"
    out = run_cli("clean-result", str(number), "--file", "-", stdin="<p>Just a paragraph.</p>")
    assert out.returncode == 0 and "version 2; lint found" in out.stdout and "✗ No TL;DR" in out.stdout


def test_clean_result_usage_errors(run_cli, make_experiment):
    """Are nothing to send (exit 2), an unreadable file (exit 2) and a refused body (exit 1) reported?"""
    number = make_experiment("Draft", status="clean_result_drafting")
    assert run_cli("clean-result", str(number)).returncode == 2
    missing = run_cli("clean-result", str(number), "--file", "/nonexistent/result.html")
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    empty = run_cli("clean-result", str(number), "--file", "-", stdin="<script>x</script>")
    assert empty.returncode == 1 and "Nothing is left of the clean result" in empty.stderr


def test_promote_needs_the_promote_scope_and_confirms_lint(app, run_cli, make_experiment):
    """Is promote refused without the scope, refused with the lint list, then done with --confirm-lint?"""
    number = make_experiment("Draft", status="clean_result_drafting")
    run_cli("clean-result", str(number), "--file", "-", stdin="<p>Just a paragraph.</p>")
    with app.app_context():
        from models import db
        from services.core.actors import Actor
        from services.workflow import lifecycle
        lifecycle.transition(experiments.get_experiment(number), "awaiting_promotion", Actor("agent"))
        db.session.commit()
    no_scope = run_cli("promote", str(number))
    assert no_scope.returncode == 1 and "missing_scope" in no_scope.stderr
    lint = run_cli("promote", str(number), scopes="write,promote")
    assert lint.returncode == 1 and "lint_failed" in lint.stderr and "--confirm-lint" in lint.stderr
    done = run_cli("promote", str(number), "--to", "completed", "--confirm-lint", scopes="write,promote")
    assert done.returncode == 0 and done.stdout.strip() == f"#{number} promoted: now completed"
