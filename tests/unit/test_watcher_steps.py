"""The pod watcher's decisions that need no database (services.dispatch.watcher): what a poll
means for a pod's status, when a missing pod has vanished, when keep-alive ends, and which
failure a dispatch's pods amount to."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from models import Pod
from services.dispatch import watcher
from services.dispatch.backends.base import ProviderPod
from services.dispatch.provisioner import PARTIAL_NOTE

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def pod(name: str = "p-0", **fields) -> Pod:
    return Pod(name=name, account="team", **fields)


@pytest.mark.parametrize("current, provider, exit_reported, seen", [
    ("deploying", "PROVISIONING", False, "deploying"),
    ("deploying", "STARTING", False, "deploying"),
    ("deploying", "RUNNING", False, "running"),
    ("running", "EXITED", False, "exited"),
    ("running", "ERROR", False, "exited"),
    ("running", "TERMINATED", False, "terminated"),
    ("running", "SOMETHING_NEW", False, "running"),    # an unknown answer changes nothing
    ("running", "RUNNING", True, "exited"),            # the script reported its exit: keep-alive
    ("deploying", "STARTING", True, "exited"),
    ("exited", "TERMINATED", True, "terminated"),
    ("stop_requested", "RUNNING", True, "running"),    # our stop is not done while the container is up
])
def test_the_status_seen_in_a_providers_answer(current, provider, exit_reported, seen):
    """Does each provider status map to Sagan's, with a reported exit turning running into exited?"""
    assert watcher.status_seen(current, provider, exit_reported=exit_reported) == seen


@pytest.mark.parametrize("current, seen, stored", [
    ("stop_requested", "exited", "stopped"),
    ("stop_requested", "terminated", "stopped"),
    ("stop_requested", "running", "stop_requested"),   # still up: the stop is still owed
    ("stop_requested", "deploying", "stop_requested"),
    ("stopped", "running", "stopped"),
    ("stopped", "terminated", "stopped"),
    ("running", "exited", "exited"),
])
def test_the_status_stored_after_a_poll(current, seen, stored):
    """Does a requested stop end in `stopped` (and stay requested while the pod is up), and
    does `stopped` never move back?"""
    assert watcher.status_settled(current, seen) == stored


def test_a_pod_has_vanished_after_three_misses_over_two_minutes():
    """Are three misses needed, spread over at least two minutes from the first?"""
    times = [(NOW - timedelta(seconds=s)).isoformat() for s in (120, 60, 0)]
    assert watcher.vanish_proven(times, NOW)
    assert not watcher.vanish_proven(times[1:], NOW)
    assert not watcher.vanish_proven([(NOW - timedelta(seconds=s)).isoformat() for s in (119, 60, 0)], NOW)
    assert not watcher.vanish_proven([NOW.isoformat()], NOW + timedelta(hours=1))


def test_the_providers_facts_are_copied_and_an_exit_once_known_is_kept():
    """Are price, uptime and SSH copied (never blanked), and is an exit or an ERROR recorded once?"""
    watched = pod(status="running", cost_per_hr=0.5, uptime_seconds=300, ssh_host="h", ssh_port=22)
    watcher.copy_provider_facts(watched, ProviderPod("x", "p-0", "RUNNING", cost_per_hr=0.0, uptime_seconds=100), NOW)
    assert (watched.cost_per_hr, watched.uptime_seconds, watched.ssh_host, watched.ssh_port) == (0.5, 300, "h", 22)
    assert watched.exit_code is None
    watcher.copy_provider_facts(watched, ProviderPod("x", "p-0", "ERROR", cost_per_hr=0.7, uptime_seconds=400,
                                                     ssh_host="h2", ssh_port=2222), NOW)
    assert (watched.cost_per_hr, watched.uptime_seconds, watched.ssh_host, watched.ssh_port) == (0.7, 400, "h2", 2222)
    assert (watched.exit_code, watched.exited_at) == (1, NOW)
    watcher.copy_provider_facts(watched, ProviderPod("x", "p-0", "EXITED", exit_code=0), NOW + timedelta(minutes=1))
    assert (watched.exit_code, watched.exited_at) == (1, NOW)
    local = pod(status="running")
    watcher.copy_provider_facts(local, ProviderPod("x", "p-0", "EXITED", exit_code=3), NOW)
    assert (local.exit_code, local.exited_at) == (3, NOW)


def test_keep_alive_ends_after_its_minutes_only_for_a_clean_exit():
    """Does keep-alive end at exited_at + keep_alive_minutes (10 by default), and only after exit 0?"""
    exited = pod(status="exited", exit_code=0, exited_at=NOW)
    assert not watcher.keep_alive_over(exited, NOW + timedelta(minutes=9, seconds=59))
    assert watcher.keep_alive_over(exited, NOW + timedelta(minutes=10))
    short = pod(status="exited", exit_code=0, exited_at=NOW, metadata_={"keep_alive_minutes": 0})
    assert watcher.keep_alive_over(short, NOW)
    assert not watcher.keep_alive_over(pod(status="exited", exit_code=2, exited_at=NOW), NOW + timedelta(days=1))
    assert not watcher.keep_alive_over(pod(status="running", exit_code=0, exited_at=NOW), NOW + timedelta(days=1))


def test_a_vanished_pod_fails_the_dispatch_naming_every_vanished_one():
    """Is every vanished pod named, and no failure given while none vanished?"""
    pods = [pod("a", status="vanished"), pod("b", status="running"), pod("c", status="vanished")]
    assert watcher.vanished_failure(pods) == ("pod_vanished", "A pod vanished: a, c", None)
    assert watcher.vanished_failure(pods[1:2]) is None


def test_the_first_non_zero_exit_fails_the_dispatch_and_a_setup_failure_says_so():
    """Is the first non-zero exit the failure, `setup failed:` its own reason, and exit 0 no failure?"""
    pods = [pod("a", exit_code=0), pod("b", exit_code=2, progress_message="loss was NaN"), pod("c", exit_code=1)]
    assert watcher.exit_failure(pods) == ("pod_exit_nonzero", "b exited with code 2. loss was NaN", None)
    setup = pod("d", exit_code=1, progress_message="setup failed: uv sync could not resolve torch")
    assert watcher.exit_failure([setup]) == (
        "setup_failed", "d exited with code 1. setup failed: uv sync could not resolve torch", None)
    assert watcher.exit_failure([pod("e", exit_code=7)]).message == "e exited with code 7."
    assert watcher.exit_failure([pod("f", exit_code=0), pod("g")]) is None


def test_a_pod_deploying_past_the_deadline_fails_one_pod_and_makes_several_partial():
    """Is one late pod a start_deadline failure, and a late pod among several a partial dispatch?"""
    deadline = timedelta(minutes=15)
    late = pod("a", status="deploying", created_at=NOW - timedelta(minutes=16))
    assert watcher.start_deadline_failure([late], NOW, deadline) == (
        "start_deadline", "Not every pod was running 15 minutes after dispatch.", None)
    partial = watcher.start_deadline_failure([late, pod("b", status="running"), pod("c", status="exited")],
                                             NOW, deadline)
    note = PARTIAL_NOTE.format(up=1, total=3)
    assert partial == ("partial_dispatch", f"{note} Last error: Not every pod was running 15 minutes after dispatch.",
                       note)
    on_time = pod("a", status="deploying", created_at=NOW - timedelta(minutes=14))
    assert watcher.start_deadline_failure([on_time], NOW, deadline) is None
    assert watcher.start_deadline_failure([pod("a", status="running", created_at=NOW - timedelta(days=1))],
                                          NOW, deadline) is None


def test_a_running_pod_silent_past_its_bootstrap_silence_fails_the_dispatch():
    """Is a running pod with no progress post after its silence minutes a bootstrap_silence failure?"""
    silent = pod("a", status="running", last_started_at=NOW - timedelta(minutes=11))
    assert watcher.bootstrap_silence_failure([silent], NOW) == (
        "bootstrap_silence", "a has been running for 10 minutes without a progress post; its bootstrap may be stuck.",
        None)
    patient = pod("b", status="running", last_started_at=NOW - timedelta(minutes=11),
                  metadata_={"bootstrap_silence_minutes": 30})
    assert watcher.bootstrap_silence_failure([patient], NOW) is None
    heard = pod("c", status="running", last_started_at=NOW - timedelta(hours=1), last_progress_at=NOW)
    assert watcher.bootstrap_silence_failure([heard], NOW) is None
    assert watcher.bootstrap_silence_failure([pod("d", status="deploying", last_started_at=NOW - timedelta(hours=1))],
                                             NOW) is None
