"""A Redis anyone can write to is refused next to local pods, at start-up: the app, the worker
serving the local queue and `make run` with a REDIS_URL stop with a sentence saying what to set."""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

from app import create_app
from config import TestConfig
from services.core.instance_security import UnsafeConfiguration, open_redis_problem

_spec = importlib.util.spec_from_file_location("run_embedded", Path(__file__).resolve().parents[2] / "scripts"
                                               / "run_embedded.py")
run_embedded = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_embedded)


def deployed(redis_url: str, local_pods: bool = True) -> type:
    """A production-like configuration (not TESTING) with this Redis and local pods on or off."""
    return type("Deployed", (TestConfig,), {"TESTING": False, "REDIS_URL": redis_url, "SAGAN_LOCAL_PODS": local_pods})


def test_local_pods_beside_a_tcp_redis_without_a_password_stop_start_up():
    """Does the app refuse to start with local pods on and a password-less TCP Redis, saying what to set?"""
    for url in ("redis://127.0.0.1:6379/0", "rediss://redis.internal:6380/0", "redis://sagan@127.0.0.1:6379/0"):
        with pytest.raises(UnsafeConfiguration) as caught:
            create_app(deployed(url))
        message = str(caught.value)
        assert "without a password" in message and "requirepass" in message and "SAGAN_LOCAL_PODS=0" in message


@pytest.mark.parametrize("redis_url, local_pods", [
    ("redis://:s3cret@127.0.0.1:6379/0", True),
    ("redis://sagan:s3cret@127.0.0.1:6379/0", True),
    ("unix:///srv/sagan/instance/redis.sock?db=0", True),
    ("redis://127.0.0.1:6379/0", False),
])
def test_a_redis_with_a_password_or_a_socket_or_no_local_pods_starts(redis_url, local_pods):
    """Does the app start with a password in REDIS_URL, a unix socket, or local pods off?"""
    assert create_app(deployed(redis_url, local_pods)) is not None
    assert (open_redis_problem(redis_url) is None) == (redis_url != "redis://127.0.0.1:6379/0")


def test_make_run_with_a_password_less_redis_url_refuses_before_starting_anything(monkeypatch, tmp_path):
    """Does `make run` (local pods on by default) with REDIS_URL at a password-less TCP Redis stop
    at once with the sentence, before the database or any process is started?"""
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/2")
    monkeypatch.delenv("SAGAN_LOCAL_PODS", raising=False)
    monkeypatch.setenv("SAGAN_INSTANCE_DIR", str(tmp_path))
    stack = run_embedded.Stack(argparse.Namespace(host="127.0.0.1", port=5999, demo=False, demo_agents=False,
                                                  web_workers=1))
    with pytest.raises(run_embedded.StartError, match="REDIS_URL points at a Redis over TCP without a password"):
        stack._start_redis()
    assert stack.children == {}
    monkeypatch.setenv("SAGAN_LOCAL_PODS", "0")
    assert stack._start_redis() == "redis://127.0.0.1:6379/2"
