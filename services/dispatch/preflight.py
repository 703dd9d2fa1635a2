"""Preflight: what a dispatch must pass before any pod is created, so no money is spent on a
dispatch that cannot work (SPEC §6.4; the old system only labelled it `epm:preflight`).

The provisioner's saga runs it first (services.dispatch.provisioner._saga). Five checks, each
a sentence the owner can act on:

- commit: the commit each pod checks out exists on the research repository's remote (the
  clone is fetched first; a commit only in Sagan's clone, never pushed, does not count). A
  pod with no commit checks out its branch, or the default branch: that branch must exist;
- entry script: the script the pod's command runs (`python train.py`, `bash run.sh`,
  `python -m pkg.mod`, `torchrun … train.py`, after a `cd` into the checkout) exists at that
  commit. A module whose top-level package is not in the repository is taken as installed;
  commands the check cannot read (a script under /opt, a path from a variable) are not
  guessed at. Without a research repository there is no checkout to look in;
- GPU prices: every GPU the pod may be placed on (its candidates, substitutes included) has
  a known price on every account that bills;
- secrets: every secret the spec names is on the owner's allowlist and set in the server's
  environment (the provisioner would otherwise drop it silently and the pod fail later);
- estimate: the spec's estimate, plus what the experiment already spent, is inside its cost cap.

A failed preflight blocks the experiment (the owner's turn) with one line per failed check,
and the dispatch fails `preflight_failed`; it is never retried by recovery.
"""
from __future__ import annotations

import os
import posixpath
import re
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from models import Experiment
from services.code import workspaces
from services.core import pod_accounts, settings
from services.core.errors import SaganError
from services.dispatch import costs, pod_secrets, spend

CHECKS = ("commit", "entry_script", "gpu_prices", "secrets", "estimate")
_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"}
_SHELLS = {"bash", "sh", "zsh", "dash"}
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
# Options of `python` that take a value (python -X opt -W arg script.py).
_PYTHON_VALUE_OPTIONS = {"-X", "-W", "--check-hash-based-pycs"}
_SCRIPT_SUFFIXES = (".py", ".sh", ".bash")
_MODULE = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")
CHECKOUT_VARIABLES = ("$SAGAN_REPO_DIR", "${SAGAN_REPO_DIR}")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    message: str


@dataclass(frozen=True)
class Report:
    checks: list[Check]

    @property
    def passed(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if not check.ok]

    def summary(self) -> str:
        if self.passed:
            return f"Preflight passed ({len(self.checks)} checks): " + "; ".join(c.message for c in self.checks)
        return "Preflight refused the dispatch before any pod was created: " + \
            "; ".join(c.message for c in self.failures)

    def as_json(self) -> dict:
        """The verdict and the checks, each message capped (a 64-pod spec can list many scripts)."""
        return {"verdict": "pass" if self.passed else "fail",
                "checks": [{**asdict(c), "message": c.message[:2000]} for c in self.checks]}


def run(experiment: Experiment, pods: list[dict], account: str, prices: dict,
        candidates: Callable[[dict, str, dict], list]) -> Report:
    """Every check for the approved `pods` on `account` (`candidates`: the provisioner's
    candidate list for one pod, so the price check sees exactly the GPUs it may try)."""
    return Report([*_code_checks(experiment, pods), _price_check(pods, account, prices, candidates),
                   _secret_check(pods), _estimate_check(experiment, pods, account, prices)])


# --- the code: commit and entry script ------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """A file a command runs (`module` False) or a module it runs with `python -m`."""
    path: str
    module: bool = False


def _code_checks(experiment: Experiment, pods: list[dict]) -> list[Check]:
    try:
        repo = workspaces.repo_settings()
    except SaganError:
        return [Check("commit", True, "no research repository is configured: the pods run without a checkout"),
                Check("entry_script", True, "not checked: there is no checkout to look in")]
    try:
        mirror = workspaces.mirror_for_reading(repo, fresh=True)
    except SaganError as exc:
        message = f"the research repository could not be fetched to check the commit: {exc.message}"
        return [Check("commit", False, message[:600]), Check("entry_script", False, "not checked: no fetch")]
    commit_problems, script_problems, seen, checked = [], [], {}, []
    checkout = _checkout_name(repo[0])
    for index, pod in enumerate(pods):
        revision, shown = _revision(experiment, pod, repo[1])
        if revision not in seen:
            seen[revision] = _resolve(mirror, revision, shown)
        sha, problem = seen[revision]
        if problem:
            if problem not in commit_problems:
                commit_problems.append(problem)
            continue
        for entry in entry_points(pod.get("dockerArgs") or "", checkout):
            missing = _missing(mirror, sha, entry)
            name = pod.get("name") or f"pod {index}"
            if missing:
                script_problems.append(f"{name}: {missing} at {sha[:12]}")
            else:
                checked.append(entry.path)
    commit = Check("commit", not commit_problems, "; ".join(commit_problems)
                   or f"the commit each pod checks out is on the remote ({', '.join(sorted({v[0][:12] for v in seen.values() if v[0]}))})")
    if commit_problems:
        return [commit, Check("entry_script", False, "not checked: the commit is not on the remote")]
    scripts = Check("entry_script", not script_problems, "; ".join(script_problems)
                    or (f"the entry script is there ({', '.join(sorted(set(checked)))})" if checked
                        else "the commands name no script in the repository"))
    return [commit, scripts]


def _checkout_name(url: str) -> str:
    """The checkout's folder under /workspace on a pod (as the bootstrap's repo_name names it)."""
    name = settings.get("research_repo_dir") or url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name.removesuffix(".git"))
    return name if name not in ("", ".", "..", ".sagan") else "repo"


def _revision(experiment: Experiment, pod: dict, default_branch: str) -> tuple[tuple[str, str], str]:
    """(kind, name) of what the pod checks out, as the provisioner tells it (pod_env) and the
    bootstrap reads it: the commit, else the branch, else the default branch."""
    env = pod.get("env") or {}
    commit = experiment.git_commit or env.get("SAGAN_GIT_COMMIT") or env.get("SAGAN_EPS_COMMIT_SHA") or ""
    if commit:
        return ("commit", commit), f"commit {commit[:12]}"
    branch = experiment.git_branch or env.get("SAGAN_GIT_BRANCH") or env.get("SAGAN_EPS_BRANCH") or ""
    if branch:
        return ("branch", branch), f"branch {branch}"
    return ("branch", default_branch), f"the default branch {default_branch}"


def _resolve(mirror: Path, revision: tuple[str, str], shown: str) -> tuple[str | None, str | None]:
    """(sha, None) when the remote has the revision, else (None, why not)."""
    kind, name = revision
    if name.startswith("-") or not re.fullmatch(r"[\w./-]{1,250}", name):
        return None, f"{shown} is not a commit or branch name git can look up"
    if kind == "branch":
        found = workspaces.read_git(mirror, "rev-parse", "--verify", "--quiet", f"refs/remotes/origin/{name}^{{commit}}",
                                    check=False)
        sha = found.stdout.strip()
        return (sha, None) if found.returncode == 0 and sha else (None, f"{shown} is not on the remote")
    found = workspaces.read_git(mirror, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", check=False)
    sha = found.stdout.strip()
    if found.returncode != 0 or not sha:
        return None, f"{shown} is not on the remote (the research repository was fetched just now)"
    branches = workspaces.read_git(mirror, "for-each-ref", "--contains", sha, "--format=%(refname)",
                                   "refs/remotes/origin", check=False).stdout.split()
    if not branches:
        return None, f"{shown} exists only in Sagan's clone: no branch of the remote contains it (push it first)"
    return sha, None


def _missing(mirror: Path, sha: str, entry: Entry) -> str | None:
    """Why `entry` is not in the repository at `sha`, or None when it is (or is not ours to check)."""
    def kind(path: str) -> str:
        result = workspaces.read_git(mirror, "cat-file", "-t", f"{sha}:{path}", check=False)
        return result.stdout.strip() if result.returncode == 0 else ""
    if not entry.module:
        return None if kind(entry.path) == "blob" else f"the entry script {entry.path} does not exist"
    parts = entry.path.split(".")
    top = parts[0]
    if not kind(top) and not kind(f"{top}.py"):
        return None  # not the repository's own package: an installed module
    as_file = "/".join(parts) + ".py"
    as_package = "/".join(parts) + "/__main__.py"
    if kind(as_file) == "blob" or kind(as_package) == "blob":
        return None
    return f"the module {entry.path} (python -m) has neither {as_file} nor {as_package}"


def entry_points(command: str, checkout: str = "repo") -> list[Entry]:
    """The scripts and modules a pod's command runs, as paths relative to the checkout.

    Reads the command as a shell would split it (`&&`, `;`, `|` separate commands; `bash -c
    '…'` is read inside), follows `cd` into the checkout's folders, and names for each simple
    command the file it runs: python's script or `-m` module, a shell's script, `./x` or a
    relative path run directly, or the first `.py`/`.sh` argument of a launcher (torchrun,
    accelerate launch, uv run …). Anything it cannot know statically is left out.
    """
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return []
    found: list[Entry] = []
    cwd: str | None = ""
    for words in _simple_commands(tokens):
        while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
            words = words[1:]  # VAR=value before the program: the environment, not the command
        if not words:
            continue
        if words[0] == "cd":
            cwd = _cd(cwd, words[1] if len(words) > 1 else "", checkout)
            continue
        if cwd is None:
            continue  # somewhere outside the checkout: nothing there is the repository's
        for entry in _entries_of(words, checkout):
            path = entry.path if entry.module else _inside(cwd, entry.path)
            if path and Entry(path, entry.module) not in found:
                found.append(Entry(path, entry.module))
    return found


def _simple_commands(tokens: list[str]) -> list[list[str]]:
    commands, current = [], []
    for token in tokens:
        if token in _SEPARATORS:
            commands.append(current)
            current = []
        else:
            current.append(token)
    commands.append(current)
    return commands


def _cd(cwd: str | None, target: str, checkout: str) -> str | None:
    """Where a `cd` leads, relative to the checkout; None once it leaves it (or cannot be known)."""
    if target in CHECKOUT_VARIABLES or target.rstrip("/") == f"/workspace/{checkout}":
        return ""
    if target.startswith(f"/workspace/{checkout}/"):
        return _inside("", target[len(f"/workspace/{checkout}/"):])
    if not target or target.startswith(("/", "~", "-")) or "$" in target or cwd is None:
        return None
    return _inside(cwd, target)


def _inside(cwd: str, path: str) -> str | None:
    """`path` from `cwd`, relative to the checkout; None when it is outside or not literal."""
    if not path or "$" in path or any(c in path for c in "*?[") or path.startswith(("/", "~")):
        return None
    joined = posixpath.normpath(posixpath.join(cwd, path))
    return None if joined == "." or joined.startswith("..") else joined


def _entries_of(words: list[str], checkout: str) -> list[Entry]:
    program = posixpath.basename(words[0])
    if program in _SHELLS:
        for i, word in enumerate(words[1:], start=1):
            if word.startswith("-") and "c" in word.lstrip("-") and not word.startswith("--"):
                return entry_points(words[i + 1], checkout) if i + 1 < len(words) else []
            if not word.startswith("-"):
                return [Entry(word)]
        return []
    if _PYTHON.fullmatch(program):
        return _python_entry(words[1:])
    if words[0].startswith("./") or ("/" in words[0] and not words[0].startswith(("/", "~", "$"))):
        return [Entry(words[0])]
    for i, word in enumerate(words[1:], start=1):  # a launcher: torchrun, accelerate launch, uv run …
        if _PYTHON.fullmatch(posixpath.basename(word)):
            return _python_entry(words[i + 1:])
        if not word.startswith("-") and word.endswith(_SCRIPT_SUFFIXES):
            return [Entry(word)]
    return []


def _python_entry(args: list[str]) -> list[Entry]:
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "-m":
            module = args[i + 1] if i + 1 < len(args) else ""
            return [Entry(module, module=True)] if _MODULE.fullmatch(module) else []
        if arg == "-c" or arg.startswith("-c"):
            return []  # inline code: no file
        if arg in _PYTHON_VALUE_OPTIONS:
            skip = True
            continue
        if arg.startswith("-"):
            continue
        return [Entry(arg)]
    return []


# --- money: prices, secrets, the estimate ------------------------------------------------------

def _price_check(pods: list[dict], account: str, prices: dict, candidates) -> Check:
    unknown: dict[str, list[str]] = {}
    for index, pod in enumerate(pods):
        for candidate in candidates(pod, account, prices):
            if pod_accounts.bills(candidate.account) and prices.get(candidate.gpu.short) is None:
                unknown.setdefault(candidate.gpu.short, [])
                name = pod.get("name") or f"pod {index}"
                if name not in unknown[candidate.gpu.short]:
                    unknown[candidate.gpu.short].append(name)
    if not unknown:
        return Check("gpu_prices", True, "every GPU a pod may use has a known price")
    listed = "; ".join(f"{gpu} (a candidate of {', '.join(names)})" for gpu, names in sorted(unknown.items()))
    return Check("gpu_prices", False, f"no known price for {listed}: set it under Settings → GPU prices, or "
                                      "take the GPU out of the plan's substitution policy")


def _secret_check(pods: list[dict]) -> Check:
    allowed = set(pod_secrets.allowlist())
    problems = []
    for name in pod_secrets.requested(pods):
        if pod_secrets.reserved(name):
            problems.append(f"{name} is one of Sagan's own secrets and never goes to a pod")
        elif name not in allowed:
            problems.append(f"{name} is not on the pod-secret allowlist (Settings → Pod secrets)")
        elif not os.environ.get(name):
            problems.append(f"{name} is not set in the server's environment")
    if problems:
        return Check("secrets", False, "the spec names secrets the pods would not get: " + "; ".join(problems))
    named = pod_secrets.requested(pods)
    return Check("secrets", True, f"every secret the spec names is configured ({', '.join(named)})" if named
                 else "the spec names no secret")


def _estimate_check(experiment: Experiment, pods: list[dict], account: str, prices: dict) -> Check:
    local = not pod_accounts.bills(account) and not costs.is_paid(costs.accounts_of(pods, account))
    estimate = costs.estimate(pods, prices, local=local)
    if estimate.total_usd is None:
        return Check("estimate", False, f"the estimate is incomplete ({', '.join(estimate.unknown_prices)} without a "
                                        "price), so it cannot be held against the cost cap")
    cap = experiment.cost_cap_usd
    if cap is None:
        return Check("estimate", True, f"estimate ${estimate.total_usd:,.2f}; no cost cap is set")
    spent = spend.experiment_spend(experiment.id)
    if spent + estimate.total_usd > cap:
        return Check("estimate", False, f"the estimate ${estimate.total_usd:,.2f} plus ${spent:,.2f} already spent "
                                        f"is over the cost cap of ${cap:,.2f}: raise the cap or shrink the plan")
    return Check("estimate", True, f"estimate ${estimate.total_usd:,.2f} (+ ${spent:,.2f} spent) is inside the "
                                   f"cap of ${cap:,.2f}")

