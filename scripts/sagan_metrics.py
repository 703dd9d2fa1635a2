"""Post scalar metrics (loss, accuracy per step) from a training script to Sagan.

Standard library only; runs on any pod with Python 3.8+. The pod's bootstrap puts this file
on PYTHONPATH, and the pod's environment says where to post (SAGAN_PROGRESS_URL, whose
/api/metrics sibling receives batches, or SAGAN_METRICS_URL) and with which token
(SAGAN_POD_PROGRESS_TOKEN, never printed).

In a script:

    import sagan_metrics
    for step in range(steps):
        ...
        sagan_metrics.log(step, loss=loss, **{"val/accuracy [%]": 100 * acc})
    sagan_metrics.flush()          # also done at exit

From a shell:

    python3 sagan_metrics.py 120 loss=0.31 "val/accuracy [%]=91.5"

The run's settings, so Sagan's charts can group runs by them:

    sagan_metrics.config(seed=3, condition="wide")

System metrics: the pod's bootstrap runs `python3 sagan_metrics.py --system 30 <dir>`
beside the training script, which posts GPU utilisation and memory (from nvidia-smi, when
the machine has it), CPU, RAM and the disk holding <dir> every 30 s, as `sys/…` metrics
whose step is the seconds since sampling started.

Points are buffered and sent in batches of up to 1,000 (or every FLUSH_SECONDS). Each
batch carries a sequence number, so a batch retried after a timeout is stored once. A
metric's unit goes in brackets at the end of its name. NaN and infinite values (a diverged
loss) are sent as they are: Sagan keeps them as non-finite points and marks them on the
chart. Failures are reported on stderr and never raise into the training script; without a
URL or token the points are printed.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

BATCH_MAX = 1000
FLUSH_SECONDS = 10.0
RETRIES = 5


def _default_url() -> str | None:
    explicit = os.environ.get("SAGAN_METRICS_URL")
    if explicit:
        return explicit
    progress = os.environ.get("SAGAN_PROGRESS_URL", "")
    if progress.endswith("/progress"):
        return progress[: -len("progress")] + "metrics"
    return None


class Metrics:
    """A buffer of points for one pod; `log` adds, `flush` sends."""

    def __init__(self, url: str | None = None, token: str | None = None, *, flush_seconds: float = FLUSH_SECONDS,
                 retry_seconds: float = 1.0, out=sys.stderr) -> None:
        self.url = url if url is not None else _default_url()
        self.token = token if token is not None else os.environ.get("SAGAN_POD_PROGRESS_TOKEN")
        self.flush_seconds = flush_seconds
        self.retry_seconds = retry_seconds
        self.out = out
        self._points: list[dict] = []
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        # Sequence numbers start at the clock in microseconds and only go up, so a script that
        # restarts on the same pod never reuses a seq (which the server would drop as a retry).
        self._seq = time.time_ns() // 1000

    def log(self, step: int, values: dict | None = None, *, wall_time: float | None = None, **named) -> None:
        """Record `name=value` pairs at `step`; a value that is not a number is skipped with a
        warning (NaN and infinity are numbers: they are sent, and the chart marks them)."""
        stamp = time.time() if wall_time is None else wall_time
        with self._lock:
            for name, value in {**(values or {}), **named}.items():
                try:
                    number = float(value)
                except (TypeError, ValueError, OverflowError):
                    self._warn(f"{name}={value!r} at step {step} is not a number; skipped")
                    continue
                self._points.append({"step": int(step), "name": str(name), "value": number, "wall_time": stamp})
            due = len(self._points) >= BATCH_MAX or time.monotonic() - self._last_flush >= self.flush_seconds
        if due:
            self.flush()

    def flush(self) -> bool:
        """Send everything buffered; True when every batch was stored (or there was nothing)."""
        with self._lock:
            points, self._points = self._points, []
            self._last_flush = time.monotonic()
        ok = True
        for start in range(0, len(points), BATCH_MAX):
            ok = self._send(points[start:start + BATCH_MAX]) and ok
        return ok

    def config(self, values: dict | None = None, **named) -> bool:
        """Report the settings this run uses (seed, condition, learning rate…): Sagan keeps
        them with the pod, and its charts can group runs by any of them. Numbers and short
        text; True when stored (or printed, without a URL)."""
        settings = {}
        for name, value in {**(values or {}), **named}.items():
            if not isinstance(value, (int, float, str)) or isinstance(value, bool):
                value = str(value)
            settings[str(name)] = value
        if not settings:
            return True
        if not self.url or not self.token:
            print(f"config {json.dumps(settings)}", file=self.out)
            return True
        return self._post(self.url.rstrip("/") + "/config", {"config": settings}, "config")

    def _next_seq(self) -> int:
        self._seq = max(self._seq + 1, time.time_ns() // 1000)
        return self._seq

    def _send(self, points: list[dict]) -> bool:
        if not self.url or not self.token:
            for point in points:
                print(f"metric step={point['step']} {point['name']}={point['value']:g}", file=self.out)
            return True
        # json writes NaN and Infinity as the bare literals, which Sagan reads as non-finite points.
        return self._post(self.url, {"seq": self._next_seq(), "points": points}, f"batch of {len(points)}")

    def _post(self, url: str, payload: dict, what: str) -> bool:
        body = json.dumps(payload).encode()
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Authorization": "Bearer " + self.token, "Content-Type": "application/json",
            "User-Agent": "sagan-metrics"})
        for attempt in range(1, RETRIES + 1):
            try:
                with urllib.request.urlopen(request, timeout=30):
                    return True
            except urllib.error.HTTPError as exc:
                answer = exc.read(300).decode("utf-8", "replace").replace("\n", " ")
                if exc.code not in (408, 425, 429) and exc.code < 500:
                    self._warn(f"{what} refused ({exc.code}): {answer}")
                    return False
                problem = f"{exc.code}: {answer}"
            except Exception as exc:  # connection refused, timeout, DNS: worth another try
                problem = f"{exc.__class__.__name__}: {exc}"
            if attempt < RETRIES:
                time.sleep(self.retry_seconds * attempt)
        self._warn(f"{what} not sent after {RETRIES} tries ({problem})")
        return False

    def _warn(self, message: str) -> None:
        print(f"sagan-metrics: {message}", file=self.out)


_default: Metrics | None = None


def _shared() -> Metrics:
    global _default
    if _default is None:
        _default = Metrics()
        atexit.register(_default.flush)
    return _default


def log(step: int, values: dict | None = None, **named) -> None:
    """Module-level `log`: one buffer per process, flushed at exit."""
    _shared().log(step, values, **named)


def flush() -> bool:
    return _shared().flush()


def config(values: dict | None = None, **named) -> bool:
    """Module-level `config`: the run's settings, for grouping runs on the charts."""
    return _shared().config(values, **named)


# --- system metrics ---------------------------------------------------------------------
GPU_QUERY = ["--query-gpu=utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"]


def gpu_readings(tool: str | None = None) -> list[tuple] | None:
    """(utilisation %, memory used MiB, memory total MiB) per GPU from nvidia-smi, a field
    None where the tool prints "[N/A]" or "[Not Supported]"; None when there is no nvidia-smi
    (a CPU-only machine) or it fails. Its CSV has one line per GPU: `37, 1530, 24564`."""
    tool = tool or shutil.which("nvidia-smi")
    if not tool:
        return None
    try:
        done = subprocess.run([tool] + GPU_QUERY, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    readings = []
    for line in done.stdout.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 3:
            continue
        readings.append(tuple(_number(field) for field in fields))
    return readings


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _cpu_times() -> tuple[float, float] | None:
    """(idle, total) jiffies of all CPUs from /proc/stat (None off Linux)."""
    try:
        with open("/proc/stat") as stat:
            fields = [float(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return fields[3] + (fields[4] if len(fields) > 4 else 0), sum(fields)


def _memory() -> tuple[float, float] | None:
    """(used, total) bytes of RAM from /proc/meminfo: used is total minus available."""
    info = {}
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                key, _, rest = line.partition(":")
                info[key] = float(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if "MemTotal" not in info or "MemAvailable" not in info:
        return None
    return info["MemTotal"] - info["MemAvailable"], info["MemTotal"]


def system_sample(path: str, previous_cpu=None, tool: str | None = None) -> tuple[dict, object]:
    """One sample of the machine: {metric name: value}, and the CPU counters for the next.

    `sys/gpus` is how many GPUs nvidia-smi listed (0 on a machine without it: the page then
    says GPU use is not measured); `sys/gpu_util [%]` is the busiest GPU's, so a value under
    5 means every GPU idles."""
    values: dict = {}
    gpus = gpu_readings(tool)
    values["sys/gpus"] = len(gpus or [])
    if gpus:
        utils = [g[0] for g in gpus if g[0] is not None]
        # Memory of the GPUs that report both numbers (a "[N/A]" one would skew the share).
        used = [g[1] for g in gpus if g[1] is not None and g[2] is not None]
        total = [g[2] for g in gpus if g[1] is not None and g[2] is not None]
        if utils:
            values["sys/gpu_util [%]"] = max(utils)
        if used and sum(total):
            values["sys/gpu_mem [%]"] = round(100 * sum(used) / sum(total), 2)
            values["sys/gpu_mem_used [GiB]"] = round(sum(used) / 1024, 3)
    cpu = _cpu_times()
    if cpu and previous_cpu:
        idle, total = cpu[0] - previous_cpu[0], cpu[1] - previous_cpu[1]
        if total > 0:
            values["sys/cpu [%]"] = round(100 * (1 - idle / total), 2)
    memory = _memory()
    if memory:
        values["sys/ram [%]"] = round(100 * memory[0] / memory[1], 2)
        values["sys/ram_used [GiB]"] = round(memory[0] / 2**30, 3)
    try:
        disk = shutil.disk_usage(path)
        values["sys/disk [%]"] = round(100 * disk.used / disk.total, 2)
    except OSError:
        pass
    return values, cpu


def watch_system(every: float, path: str, *, samples: int | None = None, metrics: Metrics | None = None) -> None:
    """Sample the machine every `every` seconds and post each sample at once (the step is the
    seconds since sampling started), until killed, the parent process ends, or `samples` are
    taken. Says once on stderr when the machine has no GPU to measure."""
    metrics = metrics or Metrics()
    started = time.monotonic()
    parent = os.getppid()
    cpu = _cpu_times()
    taken, told = 0, False
    while samples is None or taken < samples:
        time.sleep(every)
        if samples is None and os.getppid() != parent:  # the bootstrap is gone: so is the run
            return
        values, cpu = system_sample(path, cpu)
        if not values["sys/gpus"] and not told:
            metrics._warn("no nvidia-smi here (or it lists no GPU): GPU use is not measured; CPU, RAM and "
                          "disk are")
            told = True
        metrics.log(int(time.monotonic() - started), values)
        metrics.flush()
        taken += 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["--system"]:
        every = float(argv[1]) if len(argv) > 1 else 30.0
        watch_system(every, argv[2] if len(argv) > 2 else ".",
                     samples=int(argv[3]) if len(argv) > 3 else None)
        return 0
    if len(argv) < 2 or not argv[0].isdigit() or any("=" not in pair for pair in argv[1:]):
        print("usage: sagan_metrics.py STEP NAME=VALUE [NAME=VALUE …]\n"
              "       sagan_metrics.py --system [SECONDS [DIR [SAMPLES]]]", file=sys.stderr)
        return 2
    metrics = Metrics()
    metrics.log(int(argv[0]), dict(pair.rsplit("=", 1) for pair in argv[1:]))
    return 0 if metrics.flush() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
