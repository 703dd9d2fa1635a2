"""A worker started while Redis is away waits for it, and serves its queues once it answers."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest
import redis

from tests.integration.test_worker_faults import ROOT, worker_env
from tests.processes import stop_process_group
from workers.launcher import REDIS_RETRY_MAX_SECONDS, wait_for_redis


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class OutputLines:
    """A process's merged output, read on a thread, so a test can wait for a line."""

    def __init__(self, process: subprocess.Popen):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process):
        for line in process.stdout:
            self.lines.append(line)

    def wait_for(self, needle: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(needle in line for line in self.lines):
                return True
            time.sleep(0.1)
        return False


@pytest.mark.slow
def test_a_worker_started_before_redis_waits_then_serves(tmp_path):
    """With nothing listening at REDIS_URL, does the worker say so and keep waiting (not exit),
    then listen on its queues once a Redis starts there?"""
    port = free_port()
    env = worker_env(tmp_path, REDIS_URL=f"redis://127.0.0.1:{port}/0")
    worker = subprocess.Popen([sys.executable, "-m", "workers.launcher", "--no-scheduler", "--queues", "default"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    server = None
    try:
        output = OutputLines(worker)
        assert output.wait_for("does not answer", timeout=60), "".join(output.lines)
        time.sleep(2)
        assert worker.poll() is None, "the worker exited instead of waiting:\n" + "".join(output.lines)
        server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no"], stdout=subprocess.DEVNULL, start_new_session=True)
        assert output.wait_for("Listening on", timeout=60), "".join(output.lines)
        assert redis.Redis(port=port).smembers("rq:workers"), "the worker registered itself once Redis answered"
    finally:
        stop_process_group(worker)
        if server is not None:
            stop_process_group(server)


class Refusing:
    """A Redis client whose first `failures` pings are refused, as a stopped server's are."""

    def __init__(self, failures: int):
        self.failures = failures
        self.pings = 0

    def ping(self):
        self.pings += 1
        if self.pings <= self.failures:
            raise redis.exceptions.ConnectionError("Error 111 connecting. Connection refused.")
        return True


def test_the_wait_doubles_up_to_half_a_minute_and_ends_when_redis_answers():
    """Are the waits 1, 2, 4 … seconds, never more than the cap, and does the wait end at the
    first answer?"""
    slept = []
    client = Refusing(failures=8)
    wait_for_redis(client, "redis://example.invalid:6379/0", sleep=slept.append)
    assert client.pings == 9
    assert slept == [1, 2, 4, 8, 16, REDIS_RETRY_MAX_SECONDS, REDIS_RETRY_MAX_SECONDS, REDIS_RETRY_MAX_SECONDS]
