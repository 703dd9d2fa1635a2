"""`run_analysis(code)`: Python over the experiment's artifacts, in the sandbox.

One call = one bubblewrap sandbox (services.code.sandbox) that sees, besides /usr:

    /analysis-env   the analysis environment, read-only: a virtualenv of /usr/bin/python3
                    with numpy, pandas, scipy and matplotlib (scripts/analysis_env.py,
                    built by `make run` and `make test`; SAGAN_ANALYSIS_ENV)
    /artifacts      the experiment's artifacts, read-only, by their names
    /worktree       the code and its runner, read-only
    /output         the working folder: a private tmpfs of SAGAN_ANALYSIS_OUTPUT_MB, so
                    writing too much fails there (ENOSPC) instead of filling the host

No network (an empty network namespace), the code agents' time, CPU, memory and output
limits (the wall clock shortened to SAGAN_ANALYSIS_TIMEOUT_SECONDS), and an account of its
own while it runs (SAGAN_SANDBOX_ACCOUNTS), so its process limit is its own. What the code leaves
in /output comes back through the sandbox's output: when the code has finished, the
runner kills whatever it left running, then prints a trailer that begins with a marker it
draws only then (so the code cannot predict it), holding each file base64-encoded. Those
files become artifacts of the experiment under `analysis/<call>/…` (figures also become
result figures), which the analyzer embeds with `<img src="artifact:NAME">`.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import sqlalchemy as sa
from flask import current_app

from models import Artifact, Pod, db
from services.agents.file_tool_rules import clip_middle
from services.agents.research_tools import IMAGE_MAX_BYTES, MODEL_IMAGE_TYPES
from services.agents.toolkit import ToolContext, ToolResult, tool
from services.code import sandbox
from services.core.errors import SaganError, ValidationError
from services.core.redact import redact
from services.dispatch import artifacts
from services.dispatch.progress import ALLOWED_TYPES, artifact_type, clean_artifact_name
from services.workflow import runs

ENV_MOUNT = "/analysis-env"
ARTIFACTS_MOUNT = "/artifacts"
OUTPUT_MOUNT = "/output"
CODE_MAX = 100_000
MARK = "=== sagan-analysis-trailer "
IMAGES_SHOWN = 3
PRINTED_SHOWN = 40_000  # characters of the code's output in the tool result (head and tail)
INPUT_MAX_BYTES = 1024 * 1024 * 1024  # artifacts copied into one analysis, in all

# Runs inside the sandbox as /worktree/runner.py, with the analysis environment's Python.
RUNNER = r'''
import base64, json, os, secrets, signal, subprocess, sys
mark_prefix, print_limit = sys.argv[1], int(sys.argv[2])
env = dict(os.environ, MPLBACKEND="Agg", MPLCONFIGDIR="/tmp/matplotlib", OPENBLAS_NUM_THREADS="1",
           OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", ARTIFACTS="/artifacts", OUTPUT="/output")
child = subprocess.Popen([sys.executable, "-I", "/worktree/analysis.py"], cwd="/output", env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
printed, capped = 0, False
out = sys.stdout.buffer
while True:
    data = os.read(child.stdout.fileno(), 65536)
    if not data:
        break
    out.write(data[:max(print_limit - printed, 0)])
    printed += len(data)
    if printed > print_limit:
        capped = True
        child.kill()
        break
code = child.wait()
try:
    os.kill(-1, signal.SIGKILL)  # everything the code left running, so nothing writes after us
except ProcessLookupError:
    pass
files = []
if not capped:
    for folder, dirs, names in os.walk("/output"):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as handle:
                files.append({"name": os.path.relpath(path, "/output"),
                              "data": base64.b64encode(handle.read()).decode()})
out.flush()
mark = "%s%s ===" % (mark_prefix, secrets.token_hex(16))
sys.stdout.write("\n%s\n%s\n" % (mark, json.dumps({"exit": code, "printed_capped": capped, "files": files})))
'''


class AnalysisUnavailable(SaganError):
    status_code = 503
    code = "analysis_unavailable"


def environment_path() -> Path:
    """The analysis environment, or AnalysisUnavailable saying how to build it."""
    path = Path(current_app.config["SAGAN_ANALYSIS_ENV"]).absolute()
    if not (path / "bin" / "python").exists() or not (path / ".sagan-analysis-env").is_file():
        raise AnalysisUnavailable(
            f"The analysis environment is not built at {path}, so run_analysis cannot run. The operator builds it "
            "with `python scripts/analysis_env.py` (make run and make test do this).")
    return path


def _limits() -> sandbox.Limits:
    cfg = current_app.config
    output_mb = int(cfg["SAGAN_ANALYSIS_OUTPUT_MB"])
    printed = int(cfg["SAGAN_SANDBOX_OUTPUT_BYTES"])
    # Room for what the code prints plus its output folder, base64-encoded, in the trailer.
    return sandbox.Limits.from_config(timeout=float(min(int(cfg["SAGAN_ANALYSIS_TIMEOUT_SECONDS"]),
                                                        int(cfg["SAGAN_SANDBOX_TIMEOUT_SECONDS"]))),
                                      output_bytes=printed + output_mb * 1024 * 1024 * 4 // 3 + 64 * 1024)


def input_paths(rows) -> dict[str, str]:
    """Where each artifact appears under /artifacts: by its name, or `<pod>/<name>` when
    several pods uploaded the same name (seeds of one sweep often do)."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.name] = counts.get(row.name, 0) + 1
    return {str(row.id): (row.name if counts[row.name] == 1 else f"{row.pod or 'analysis'}/{row.name}")
            for row in rows}


def _write_inputs(folder: Path, code: str, inputs: list[tuple[str, bytes]]) -> list[str]:
    """The code, the runner and the artifacts, readable by the sandbox user; the paths that
    could not be placed (a file where another artifact needs a folder)."""
    folder.chmod(0o711)
    work, artifacts = folder / "code", folder / "artifacts"
    for path in (work, artifacts):
        path.mkdir(mode=0o755)
        path.chmod(0o755)
    (work / "analysis.py").write_text(code)
    (work / "runner.py").write_text(RUNNER)
    unplaced = []
    for name, content in inputs:
        target = artifacts / name
        try:
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            target.write_bytes(content)
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            unplaced.append(name)
    for current, dirs, files in os.walk(folder):
        os.chmod(current, 0o755 if current != str(folder) else 0o711)
        for name in files:
            os.chmod(os.path.join(current, name), 0o644)
    return unplaced


def split_trailer(output: str) -> tuple[str, dict | None]:
    """(what the code printed, the runner's trailer) — the trailer is the last marked block."""
    at = output.rfind("\n" + MARK)
    if at < 0:
        return output, None
    printed, rest = output[:at], output[at + 1:]
    lines = rest.split("\n", 2)
    try:
        return printed, json.loads(lines[1])
    except (IndexError, ValueError):
        return printed, None


def _store(experiment, run, call_id: str, files: list[dict]) -> tuple[list[Artifact], list[str]]:
    """The output files as artifacts of the experiment, within its budgets; notes on files
    that were skipped. Large ones are left `processing` (services/dispatch/artifacts.py)."""
    stored, skipped = [], []
    limit = current_app.config["ARTIFACT_MAX_BYTES"]
    for item in files:
        try:
            name = clean_artifact_name(f"analysis/{call_id}/{item['name']}")
            content_type = artifact_type(name, None)
        except ValidationError as exc:
            skipped.append(f"{item['name']}: {exc.message}")
            continue
        content = base64.b64decode(item["data"])
        if len(content) > limit:
            skipped.append(f"{item['name']}: {len(content):,} bytes is over the artifact limit of {limit:,}")
            continue
        try:
            with db.session.begin_nested():  # one refused file leaves the others stored
                artifact = artifacts.store(experiment_id=experiment.id, pod_id=None, name=name,
                                           content_type=content_type, content=content)
        except SaganError as exc:  # past a budget (413), text that is not UTF-8, markup nested too deep
            skipped.append(f"{item['name']}: {exc.message}")
            continue
        runs.append_event(run.id, "artifact_uploaded", name, {"size": artifact.size, "analysis": call_id})
        stored.append(artifact)
    return stored, skipped


@tool("run_analysis", "Run Python (numpy, pandas, scipy, matplotlib) over this experiment's artifacts in the "
                      "sandbox: they are read-only under /artifacts ($ARTIFACTS) by name, or /artifacts/<pod>/<name> "
                      "when several pods uploaded one name. Figures (PNG/SVG), CSV or JSON written to the working "
                      "folder /output ($OUTPUT) become artifacts you can embed. No network; time, memory and "
                      "output are limited.",
      {"code": {"type": "string", "maxLength": CODE_MAX, "description": "a Python script"},
       "timeout_seconds": {"type": "integer", "description": "shorter than the configured limit, if you like"}},
      ["code"], own_transaction=True)
def run_analysis(ctx: ToolContext, data: dict) -> ToolResult:
    code = data["code"]
    if not code.strip():
        raise ValidationError("Give the Python code to run.", field="code")
    if "\x00" in code:
        raise ValidationError("The code contains a NUL character.", field="code")
    experiment, run = ctx.need_experiment(), ctx.run
    env_path = environment_path()
    sandbox.check_available()
    limits = _limits()
    if data.get("timeout_seconds"):
        limits = dataclasses.replace(limits, timeout=float(max(1, min(int(data["timeout_seconds"]), limits.timeout))))
    rows = db.session.execute(sa.select(Artifact.id, Artifact.name, Artifact.content, Artifact.size,
                                        Pod.name.label("pod"))
                              .outerjoin(Pod, Pod.id == Artifact.pod_id)
                              .where(Artifact.experiment_id == experiment.id, Artifact.status == "ready")
                              .order_by(Artifact.name)).all()
    # Still being redacted, or failed: not readable, so not mounted (and named below).
    unready = list(db.session.scalars(sa.select(Artifact.name).where(Artifact.experiment_id == experiment.id,
                                                                     Artifact.status != "ready")))
    if sum(r.size for r in rows) > INPUT_MAX_BYTES:
        raise ValidationError(f"This experiment's artifacts pass {INPUT_MAX_BYTES:,} bytes in all; too much to "
                              "mount for one analysis.", field="code")
    paths = input_paths(rows)
    inputs = [(paths[str(r.id)], r.content) for r in rows]
    # Nothing below touches the database until the results are stored: the sandbox can run for
    # minutes, and an open transaction would hold SQLite's write lock meanwhile.
    db.session.commit()
    call_id = uuid.uuid4().hex[:8]
    folder = Path(tempfile.mkdtemp(prefix="sagan-analysis-"))
    try:
        unplaced = _write_inputs(folder, code, inputs)
        mounts = (sandbox.Mount(ENV_MOUNT, str(env_path)), sandbox.Mount(ARTIFACTS_MOUNT, str(folder / "artifacts")),
                  sandbox.Mount(OUTPUT_MOUNT, size_mb=int(current_app.config["SAGAN_ANALYSIS_OUTPUT_MB"])))
        argv = [f"{ENV_MOUNT}/bin/python", "-I", "/worktree/runner.py", MARK,
                str(current_app.config["SAGAN_SANDBOX_OUTPUT_BYTES"])]
        # An account of its own: a fork bomb here cannot use up another analysis's process limit.
        outcome = sandbox.run(folder / "code", argv,
                              writable=False, limits=limits, mounts=mounts, own_account=True,
                              shown_as=f"run_analysis ({code.count(chr(10)) + 1} lines of Python)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    printed, trailer = split_trailer(outcome.output)
    outcome.output = clip_middle(printed, PRINTED_SHOWN)  # the start and the end (the error) both show
    if trailer is not None:
        outcome.exit_code = trailer.get("exit")
        if trailer.get("printed_capped"):  # the runner's cap on what the code prints
            outcome.output_capped = True
            outcome.limits = dataclasses.replace(limits, output_bytes=int(current_app.config["SAGAN_SANDBOX_OUTPUT_BYTES"]))
    text = outcome.describe()
    if unplaced:
        text += "\nNot under /artifacts (a file of that name is in the way): " + ", ".join(unplaced)
    if unready:
        text += "\nNot under /artifacts (still being processed, or failed; list_artifacts says which): " + \
            ", ".join(unready)
    output_mb = current_app.config["SAGAN_ANALYSIS_OUTPUT_MB"]
    if "No space left on device" in printed or "File too large" in printed:
        text += (f"\nThe code wrote more than the output folder holds ({output_mb} MB) or a file over the size "
                 "limit; write less (fewer points, smaller figures).")
    if "Network is unreachable" in printed or "Temporary failure in name resolution" in printed:
        text += "\nThere is no network in the analysis sandbox: work from the artifacts under /artifacts."
    if trailer is None or not outcome.ok:
        # A failed analysis changes nothing: half-written figures are not evidence.
        return ToolResult(redact(text + "\nNo files were kept."), is_error=True)
    with db.session.begin_nested():
        stored, skipped = _store(experiment, run, call_id, trailer.get("files") or [])
    images = [(a.content_type, a.content) for a in stored
              if a.content_type in MODEL_IMAGE_TYPES and a.size <= IMAGE_MAX_BYTES][:IMAGES_SHOWN]
    listed = [f"- {a.name} ({a.content_type}, {a.size:,} bytes{', being processed' if not a.readable else ''})"
              for a in stored]
    summaries = [artifacts.Stored.of(a) for a in stored]
    db.session.commit()  # the files are the experiment's now: their processing jobs read them
    for summary in summaries:
        artifacts.enqueue_processing(summary)
    if stored:
        text += "\nFiles written, now artifacts of #%d (embed a figure with <img src=\"artifact:NAME\">):\n" % \
            experiment.number + "\n".join(listed)
    if skipped:
        text += "\nNot kept (allowed types: " + ", ".join(sorted(ALLOWED_TYPES)) + "):\n" + \
            "\n".join(f"- {s}" for s in skipped)
    if images:
        text += f"\nThe first {len(images)} image(s) follow, so you can check them."
    return ToolResult(redact(text), images=images)
