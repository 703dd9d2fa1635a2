"""Create or update the analysis environment that `run_analysis` code imports from.

    python scripts/analysis_env.py [PATH]

PATH defaults to SAGAN_ANALYSIS_ENV (else <instance>/analysis-env). The environment is a
virtualenv of a Python under /usr (SAGAN_ANALYSIS_PYTHON, default /usr/bin/python3): the
sandbox mounts /usr and the environment read-only, and nothing else of the host, so an
interpreter from anywhere else (pyenv under /root, Sagan's own .venv) would not be there.

Idempotent and fast when nothing changed: a stamp file holds a hash of the interpreter's
version and requirements-analysis.txt; when it matches, the script exits at once. When the
install fails, the old environment is left as it was and the exit status is 1.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "requirements-analysis.txt"
STAMP = ".sagan-analysis-env"


def default_path() -> Path:
    instance = Path(os.environ.get("SAGAN_INSTANCE_DIR", ROOT / "instance"))
    return Path(os.environ.get("SAGAN_ANALYSIS_ENV") or instance / "analysis-env")


def fingerprint(python: str) -> str:
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True,
                             check=True).stdout
    return hashlib.sha256((version + REQUIREMENTS.read_text()).encode()).hexdigest()


def ensure(path: Path, python: str) -> bool:
    """Build the environment at `path` unless its stamp says it is current; True if it built."""
    if not Path(python).is_file() or not python.startswith("/usr/"):
        raise SystemExit(f"The analysis environment needs a Python under /usr (the sandbox sees only /usr); "
                         f"{python!r} is not one. Install python3 and python3-venv, or set SAGAN_ANALYSIS_PYTHON.")
    wanted = fingerprint(python)
    stamp = path / STAMP
    if stamp.is_file() and stamp.read_text().strip() == wanted:
        return False
    staging = path.with_name(path.name + ".building")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([python, "-m", "venv", str(staging)], check=True)
    subprocess.run([str(staging / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                    "--progress-bar", "off", "-q", "-r", str(REQUIREMENTS)], check=True)
    (staging / STAMP).write_text(wanted + "\n")
    # Everyone may read it: sandboxed code runs as SAGAN_SANDBOX_USER when Sagan is root.
    for folder, dirs, files in os.walk(staging):
        os.chmod(folder, 0o755)
        for name in files:
            file = os.path.join(folder, name)
            if not os.path.islink(file):
                os.chmod(file, os.stat(file).st_mode | 0o444)
    old = path.with_name(path.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        path.rename(old)
    staging.rename(path)
    shutil.rmtree(old, ignore_errors=True)
    return True


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else default_path()
    python = os.environ.get("SAGAN_ANALYSIS_PYTHON") or "/usr/bin/python3"
    try:
        built = ensure(path.absolute(), python)
    except subprocess.CalledProcessError as exc:
        print(f"Could not build the analysis environment at {path}: {exc}", file=sys.stderr)
        return 1
    print(f"Analysis environment {'built' if built else 'up to date'} at {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
