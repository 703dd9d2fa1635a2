"""System metrics from a pod and the idle-GPU flag: the metrics helper's sampler reads a
stand-in `nvidia-smi` on PATH, posts `sys/…` metrics over real HTTP, and a paid pod whose
GPUs stay under 5 % for 15 minutes while its script runs is flagged on the pod card, the
board card and the owner's queue. The window passes on the project's clock, not by sleeping.

The stand-in prints what the real tool prints for
`nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits`
(the man page's CSV query output, as seen on real machines): one line per GPU, the fields in
the order asked, separated by a comma and a space, no header and no units — utilisation in
percent, memory in MiB — e.g. `37, 1530, 24564`; a field the GPU cannot report reads
`[N/A]` (or `[Not Supported]`). With other arguments it fails as the real tool does on a
bad query (exit code 2, a message on stderr)."""
from __future__ import annotations

import importlib.util
import os
import stat
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import MetricSeries, Pod, db
from services.core import clock
from services.dispatch import system_metrics

ROOT = Path(__file__).resolve().parents[2]
QUERY = "--query-gpu=utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits"


def _helper():
    """scripts/sagan_metrics.py as the pod runs it (the file the bootstrap fetches)."""
    spec = importlib.util.spec_from_file_location("sagan_metrics_under_test", ROOT / "scripts" / "sagan_metrics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stand_in(folder: Path, lines_file: Path) -> Path:
    """An `nvidia-smi` that prints the lines in `lines_file` for the query the helper asks."""
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "nvidia-smi"
    tool.write_text("#!/bin/sh\n"
                    f'if [ "$*" != "{QUERY}" ]; then echo "Invalid combination of input arguments." >&2; exit 2; fi\n'
                    f'cat "{lines_file}"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return tool


@pytest.fixture
def gpu_machine(tmp_path, monkeypatch):
    """PATH with the stand-in nvidia-smi first; set_gpus(...) changes what it reports."""
    lines = tmp_path / "gpus.csv"
    lines.write_text("0, 1530, 24564\n0, 1210, 24564\n")
    _stand_in(tmp_path / "bin", lines)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")

    def set_gpus(*rows: str) -> None:
        lines.write_text("".join(row + "\n" for row in rows))
    return set_gpus


def _paid(app, pod_id, *, rate=1.49, run_index=2, account="team") -> None:
    with app.app_context():
        pod = db.session.get(Pod, pod_id)
        pod.account, pod.cost_per_hr, pod.run_index = account, rate, run_index
        db.session.commit()


def _sample(helper, live_server, secret, folder) -> None:
    """One sample taken and posted by the helper's sampler, as on a pod. The sampler waits
    before it samples (30 s on a pod); here 30 ms, so the CPU share it reads from /proc/stat
    spans a few clock ticks (10 ms each) — with no wait the interval was usually shorter than
    one tick and the sample had no CPU share at all."""
    metrics = helper.Metrics(f"{live_server.url}/api/metrics", secret, out=open(os.devnull, "w"))
    helper.watch_system(0.03, str(folder), samples=1, metrics=metrics)


def _flags(client, number) -> dict:
    return {"pod card": client.get(f"/experiments/{number}").get_data(as_text=True),
            "board": client.get("/board").get_data(as_text=True),
            "queue": client.get("/your-turn").get_data(as_text=True)}


def test_the_sampler_reads_nvidia_smi_and_the_machine(gpu_machine, tmp_path):
    """Does one sample carry the busiest GPU's utilisation, GPU memory over all GPUs, RAM and
    disk, and read `[N/A]` as no value?"""
    helper = _helper()
    gpu_machine("12, 2048, 8192", "40, [N/A], 8192")
    # CPU use is the share of /proc/stat's jiffies spent busy since the previous reading: let
    # at least one tick pass (10 ms), or a fast sample has no interval to divide by.
    previous = helper._cpu_times()
    deadline = time.monotonic() + 5
    while helper._cpu_times()[1] == previous[1] and time.monotonic() < deadline:
        time.sleep(0.005)
    values, _cpu = helper.system_sample(str(tmp_path), previous)
    assert values["sys/gpus"] == 2 and values["sys/gpu_util [%]"] == 40.0
    assert values["sys/gpu_mem_used [GiB]"] == 2.0 and values["sys/gpu_mem [%]"] == 25.0  # of the GPU that reports both
    assert 0 < values["sys/ram [%]"] <= 100 and 0 < values["sys/disk [%]"] <= 100 and "sys/cpu [%]" in values


def test_a_paid_pod_idling_15_minutes_is_flagged_everywhere(app, owner, client, make_live_pod, live_server,
                                                             gpu_machine, tmp_path):
    """Does a RunPod pod at $1.49/h whose stand-in nvidia-smi reports 0 % for 15 minutes get
    "pod 2: GPU idle for 15 min — $1.49/h" on its card, its board card and the queue, and not
    at 14 minutes, nor once a GPU gets busy?"""
    helper = _helper()
    pod = make_live_pod("Idle GPUs", tag="idle")
    _paid(app, pod.id)
    for minute_half in range(29):          # 0 … 14 minutes, a sample every 30 s
        _sample(helper, live_server, pod.secret, tmp_path)
        clock.advance(timedelta(seconds=30))
    words = "pod 2: GPU idle for 14 min"
    assert not any(words in page or "GPU idle" in page for page in _flags(client, pod.number).values())

    _sample(helper, live_server, pod.secret, tmp_path)   # 14.5 min
    clock.advance(timedelta(seconds=30))
    _sample(helper, live_server, pod.secret, tmp_path)   # 15 min since the first idle sample
    flagged = _flags(client, pod.number)
    for where, page in flagged.items():
        assert "pod 2: GPU idle for 15 min — $1.49/h" in page, where
    card = flagged["board"][flagged["board"].index(f'id="card-{pod.number}"'):]
    assert "GPU idle for 15 min" in card[:card.index("</article>")]
    assert "GPU 0%" in flagged["pod card"]  # the card's readings line

    gpu_machine("63, 9000, 24564", "0, 1210, 24564")      # one GPU gets to work
    clock.advance(timedelta(seconds=30))
    _sample(helper, live_server, pod.secret, tmp_path)
    assert not any("GPU idle" in page for page in _flags(client, pod.number).values())


def test_local_pods_and_exited_scripts_are_not_flagged(app, owner, client, make_live_pod, live_server,
                                                       gpu_machine, tmp_path):
    """Is a local pod (it bills nothing) never flagged, nor a paid pod whose script exited
    (it idles in keep-alive by design), nor one whose sampler went quiet?"""
    helper = _helper()
    local, exited = make_live_pod("Local idle", tag="local"), make_live_pod("Exited idle", tag="exited")
    _paid(app, exited.id)
    for _ in range(32):
        _sample(helper, live_server, local.secret, tmp_path)
        _sample(helper, live_server, exited.secret, tmp_path)
        clock.advance(timedelta(seconds=30))
    with app.app_context():
        pods = db.session.scalars(sa.select(Pod).where(Pod.id.in_([local.id, exited.id]))).all()
        assert list(system_metrics.idle_gpus(pods, clock.utcnow() - timedelta(seconds=30))) == [exited.id]
        db.session.get(Pod, exited.id).exit_code = 0
        db.session.commit()
        pods = db.session.scalars(sa.select(Pod).where(Pod.id.in_([local.id, exited.id]))).all()
        assert system_metrics.idle_gpus(pods) == {}
        db.session.get(Pod, exited.id).exit_code = None
        db.session.commit()
        pods = db.session.scalars(sa.select(Pod).where(Pod.id.in_([local.id, exited.id]))).all()
        # Five minutes with no sample: nothing is known, so nothing is claimed.
        assert system_metrics.idle_gpus(pods, clock.utcnow() + timedelta(minutes=5)) == {}


def test_a_cpu_only_machine_says_gpu_use_is_not_measured(app, owner, client, make_live_pod, live_server,
                                                         tmp_path, monkeypatch):
    """Without nvidia-smi, does the sampler still post CPU, RAM and disk, and the pod card say
    GPU use is not measured (and no idle flag)?"""
    empty = tmp_path / "no-gpu"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    helper = _helper()
    pod = make_live_pod("CPU only", tag="cpu")
    _paid(app, pod.id)
    for _ in range(32):
        _sample(helper, live_server, pod.secret, tmp_path)
        clock.advance(timedelta(seconds=30))
    with app.app_context():
        names = set(db.session.scalars(sa.select(MetricSeries.name).where(MetricSeries.pod_id == pod.id)))
    assert {"sys/gpus", "sys/ram [%]", "sys/disk [%]", "sys/cpu [%]"} <= names and "sys/gpu_util [%]" not in names
    page = client.get(f"/experiments/{pod.number}").get_data(as_text=True)
    assert "GPU use not measured: no nvidia-smi on this machine" in page and "RAM " in page
    assert "GPU idle" not in page
