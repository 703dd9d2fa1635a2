"""serve.py: the web server's command line, and the layer that keeps the process
environment out of each request's environ."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from flask import Flask

import serve

_spec = importlib.util.spec_from_file_location("run_embedded", serve.ROOT / "scripts" / "run_embedded.py")
run_embedded = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_embedded)


def test_the_command_serves_the_factory_with_bounded_threads():
    argv = serve.command(host="127.0.0.1", port=8123, workers=3, threads=2)
    assert argv[1] == "SAGAN_WEB_THREADS=2" and argv[3:5] == ["-m", "granian"]
    options = dict(zip(argv[5::1], argv[6::1]))
    assert options["--interface"] == "wsgi" and options["--factory"] == "serve:wsgi_app"
    assert options["--host"] == "127.0.0.1" and options["--port"] == "8123" and options["--workers"] == "3"
    assert options["--blocking-threads"] == str(2 + serve.body_readers() + serve.SPARE_THREADS)
    assert options["--backpressure"] == str(serve.CONNECTIONS_PER_WORKER)
    assert "--respawn-failed-workers" in argv and "--no-ws" in argv


def test_process_environment_is_dropped_and_the_request_kept(monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "process-secret-value")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("HTTP_X_TEAM", "team-a")
    monkeypatch.setenv("PATH_INFO", "/")
    seen = {}

    def app(environ, start_response):
        seen.update(environ)
        return []

    layer = serve.without_process_environment(app)
    # What granian hands the app: a copy of the process environment, then the request.
    environ = {"SECRET_KEY": "process-secret-value", "HTTP_PROXY": "http://proxy.internal:3128",
               "HTTP_X_TEAM": "team-b", "PATH_INFO": "/", "REQUEST_METHOD": "GET", "HTTP_HOST": "sagan.test"}
    layer(environ, lambda *a: None)
    assert "SECRET_KEY" not in seen and "HTTP_PROXY" not in seen
    # A request header that differs from a same-named variable is the request's own.
    assert seen["HTTP_X_TEAM"] == "team-b"
    # The request line is never taken for the environment, even when the values coincide.
    assert seen["PATH_INFO"] == "/" and seen["REQUEST_METHOD"] == "GET" and seen["HTTP_HOST"] == "sagan.test"


@pytest.mark.parametrize("argv", [["--workers", "0"], ["--threads", "0"], ["--port", "eighty"]])
def test_bad_options_are_refused_before_anything_starts(argv, capsys, monkeypatch):
    monkeypatch.setattr(serve.os, "execv", _must_not_start)
    with pytest.raises(SystemExit) as exit_:
        serve.main(argv)
    assert exit_.value.code == 2
    assert "error" in capsys.readouterr().err


@pytest.mark.parametrize("variable", ["PORT", "WEB_CONCURRENCY", "SAGAN_WEB_THREADS"])
def test_a_bad_environment_value_is_refused_like_the_option(variable, capsys, monkeypatch):
    monkeypatch.setenv(variable, "lots")
    monkeypatch.setattr(serve.os, "execv", _must_not_start)
    with pytest.raises(SystemExit) as exit_:
        serve.main([])
    assert exit_.value.code == 2 and "invalid int value: 'lots'" in capsys.readouterr().err


def test_the_environment_sets_the_defaults(monkeypatch):
    monkeypatch.setenv("PORT", "5123")
    monkeypatch.setenv("WEB_CONCURRENCY", "3")
    started = []
    monkeypatch.setattr(serve.os, "execv", lambda path, argv: started.append(argv))
    serve.main([])
    argv = started[0]
    assert argv[argv.index("--port") + 1] == "5123" and argv[argv.index("--workers") + 1] == "3"
    assert f"SAGAN_WEB_THREADS={serve.DEFAULT_THREADS}" in argv


@pytest.mark.parametrize("value", ["thirty", "-5", "1.5"])
def test_a_bad_statement_timeout_is_refused_before_anything_starts(value, capsys, monkeypatch):
    monkeypatch.setenv("SAGAN_WEB_STATEMENT_TIMEOUT_SECONDS", value)
    monkeypatch.setattr(serve.os, "execv", _must_not_start)
    with pytest.raises(SystemExit) as exit_:
        serve.main([])
    assert exit_.value.code == 2
    assert "SAGAN_WEB_STATEMENT_TIMEOUT_SECONDS must be a whole number of seconds" in capsys.readouterr().err


@pytest.mark.parametrize(("variable", "value", "says"), [
    ("SAGAN_WEB_BODY_READERS", "0", "must be at least 1"),
    ("SAGAN_WEB_BODY_READERS", "many", "must be a whole number"),
    ("SAGAN_WEB_BODY_READERS_PER_CLIENT", "-2", "must be a whole number"),
])
def test_bad_body_reader_settings_are_refused_before_anything_starts(variable, value, says, capsys, monkeypatch):
    monkeypatch.setenv(variable, value)
    monkeypatch.setattr(serve.os, "execv", _must_not_start)
    with pytest.raises(SystemExit) as exit_:
        serve.main([])
    assert exit_.value.code == 2 and says in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_embedded.parse_args([])


@pytest.mark.parametrize("value", ["thirty", "-5"])
def test_make_run_refuses_a_bad_statement_timeout_before_anything_starts(value, capsys, monkeypatch):
    monkeypatch.setenv("SAGAN_WEB_STATEMENT_TIMEOUT_SECONDS", value)
    with pytest.raises(SystemExit) as exit_:
        run_embedded.parse_args([])
    assert exit_.value.code == 2
    assert "SAGAN_WEB_STATEMENT_TIMEOUT_SECONDS must be a whole number of seconds" in capsys.readouterr().err


def test_the_web_server_limits_each_statement_and_other_processes_do_not():
    from config import Config
    assert serve.web_config().STATEMENT_TIMEOUT_SECONDS == Config.WEB_STATEMENT_TIMEOUT_SECONDS == 30
    assert Config.STATEMENT_TIMEOUT_SECONDS == 0  # workers, migrations and the CLI


def test_the_served_app_is_built_with_the_web_config(monkeypatch):
    import app as app_module
    built = []
    monkeypatch.setattr(app_module, "create_app", lambda config: built.append(config) or Flask("served"))
    served = serve.wsgi_app()
    assert built[0].STATEMENT_TIMEOUT_SECONDS == 30
    assert isinstance(served.wsgi_app, type(serve.without_process_environment(None)))


def _must_not_start(*_args):
    raise AssertionError("the server was started")


def _redis_stand_in(on_term: str) -> subprocess.Popen:
    """A process standing in for redis-server: on SIGTERM it `exits` after a short save, or
    `ignores` the signal (a wedged server)."""
    handler = ("lambda *a: (time.sleep(0.5), sys.exit(0))" if on_term == "exits" else "signal.SIG_IGN")
    code = (f"import signal, sys, time\nsignal.signal(signal.SIGTERM, {handler})\n"
            "print('ready', flush=True)\nwhile True: time.sleep(0.1)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    assert child.stdout.readline().strip() == "ready"
    return child


@pytest.mark.parametrize("signals", [1, 2])
def test_a_ctrl_c_stop_lets_redis_save_and_is_not_an_error(capsys, signals):
    """Pressed once or twice, does Ctrl-C stop a Redis that saves on SIGTERM without "did not
    stop; killing it", and count as a clean stop (make exits 0)?"""
    stack = run_embedded.Stack(run_embedded.parse_args([]))
    stack.children["redis"] = child = _redis_stand_in("exits")
    stack.signals = signals
    assert stack.shutdown() is True
    assert child.returncode == 0
    assert "did not stop" not in capsys.readouterr().out


def test_a_second_ctrl_c_ends_a_wedged_redis_soon_and_says_it_was_asked(capsys):
    """Does a second Ctrl-C end a Redis that ignores SIGTERM after the short hurried grace
    (not the full ten seconds), say it was stopped as asked, and still count as clean?"""
    stack = run_embedded.Stack(run_embedded.parse_args([]))
    stack.children["redis"] = child = _redis_stand_in("ignores")
    stack.signals = 2
    assert stack.shutdown() is True
    assert child.returncode is not None
    out = capsys.readouterr().out
    assert "at once, as asked" in out and "did not stop" not in out


def test_a_redis_that_ignores_one_stop_request_is_killed_and_reported(capsys, monkeypatch):
    """Without a second Ctrl-C, is a Redis that does not stop within its grace killed, said so,
    and the stop reported as unclean?"""
    monkeypatch.setattr(run_embedded, "REDIS_STOP_GRACE", 0.5)
    stack = run_embedded.Stack(run_embedded.parse_args([]))
    stack.children["redis"] = child = _redis_stand_in("ignores")
    stack.signals = 1
    assert stack.shutdown() is False
    assert child.returncode is not None
    assert "did not stop within" in capsys.readouterr().out


def test_a_worker_account_reaches_a_python_behind_a_closed_folder_through_a_covered_mount():
    """`make run` as root starts its unprivileged workers as the worker account. Where the
    interpreter sits behind a folder that account cannot pass (pyenv under a 0700 /root), the
    command covers that folder in a private mount namespace and binds back only what is
    needed; where nothing is in the way, it is a plain uid/gid switch."""
    import shutil
    import tempfile
    from pathlib import Path
    from types import SimpleNamespace
    account = SimpleNamespace(pw_uid=64_000, pw_gid=64_000, pw_name="sagan")
    tmp_path = Path(tempfile.mkdtemp(prefix="sagan-account-", dir="/tmp"))  # pytest's tmp_path is closed to others
    closed, open_ = tmp_path / "closed", tmp_path / "open"
    (closed / "python" / "bin").mkdir(parents=True)
    (open_ / "checkout").mkdir(parents=True)
    closed.chmod(0o700)
    open_.chmod(0o755)
    tmp_path.chmod(0o755)
    for folder in tmp_path.parents:
        if not run_embedded._traversable(folder, account):
            shutil.rmtree(tmp_path)
            pytest.skip(f"{folder} is closed to others on this machine")
    assert run_embedded.blocked_ancestor(closed / "python" / "bin", account) == closed
    assert run_embedded.blocked_ancestor(open_ / "checkout", account) is None

    argv, identity = run_embedded.account_command(["python", "-m", "x"], account, [open_ / "checkout"])
    assert argv == ["python", "-m", "x"] and identity == {"user": 64_000, "group": 64_000, "extra_groups": []}

    needed = [closed / "python", closed / "python" / "bin", open_ / "checkout"]
    argv, identity = run_embedded.account_command(["python", "-m", "x"], account, needed)
    assert identity == {}  # setpriv drops, after the mounts
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    layout = argv[argv.index("-c") + 3:]  # after `sh -c SCRIPT sh`
    # One covered folder, holding one path (the nested one is inside it); then the drop.
    assert layout[:4] == [str(closed), "1", str(closed / "python"), "--"]
    assert layout[4:9] == ["setpriv", "--reuid=64000", "--regid=64000", "--clear-groups", "--inh-caps=-all"]
    assert layout[-3:] == ["python", "-m", "x"]
    shutil.rmtree(tmp_path)
