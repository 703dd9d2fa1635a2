"""The `runpod-spec` (SPEC §6.1–6.3): GPU catalogue, validation, substitution candidates.

Validation never throws on the first problem: it returns every problem with the pod
index and field path (`[2].substitution_policy.gpuType.allowed[1]: unknown GPU "B300";
known: …`), so a planner or the owner can fix a spec in one pass. Unknown fields are kept
and listed, not fatal.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from services import registry


@dataclass(frozen=True)
class Gpu:
    short: str
    provider_id: str
    vram_gb: int
    reference_price: float | None  # USD per GPU-hour; None: unknown until the owner sets it


# One table maps short names and aliases to provider ids (SPEC §6.2). Lesson: specs said
# "RTX 4090" and "A100-SXM" while the old lookup knew only "RTX4090" and "A100".
GPUS = [
    Gpu("H100", "NVIDIA H100 80GB HBM3", 80, 2.69),
    Gpu("H200", "NVIDIA H200", 141, None),
    Gpu("A100", "NVIDIA A100-SXM4-80GB", 80, 1.49),
    Gpu("L40S", "NVIDIA L40S", 48, None),
    Gpu("RTX4090", "NVIDIA GeForce RTX 4090", 24, None),
]
GPU_ALIASES = {"A100-SXM": "A100", "A100-SXM4-80GB": "A100", "RTX 4090": "RTX4090",
               "H100-SXM": "H100"}
GPU_BY_SHORT = {g.short: g for g in GPUS}


def _key(name: str) -> str:
    return " ".join(str(name).split()).upper()


_LOOKUP: dict[str, Gpu] = {}
for _gpu in GPUS:
    _LOOKUP[_key(_gpu.short)] = _gpu
    _LOOKUP[_key(_gpu.provider_id)] = _gpu
for _alias, _short in GPU_ALIASES.items():
    _LOOKUP[_key(_alias)] = GPU_BY_SHORT[_short]


def find_gpu(name) -> Gpu | None:
    """The catalogue entry for a short name, alias or provider id (case and spacing tolerant)."""
    if not isinstance(name, str):
        return None
    return _LOOKUP.get(_key(name))


def known_gpu_names() -> str:
    return ", ".join([g.short for g in GPUS] + sorted(GPU_ALIASES))


KNOWN_FIELDS = {
    "name", "gpuType", "gpuCount", "volumeGb", "containerDiskGb", "cloudType", "estimatedMinutes",
    "env", "dockerArgs", "image", "config", "substitution_policy", "consolidation",
    "keepAliveMinutes", "bootstrapSilenceMinutes", "secrets",
}
ACCOUNTS = [a for a in registry.RUNPOD_ACCOUNTS]
SECRET_NAME_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


@dataclass
class SpecCheck:
    pods: list[dict]
    problems: list[str]
    unknown_fields: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def parse_spec_text(text: str) -> tuple[object | None, str | None]:
    """JSON from a runpod-spec block, or an error naming the line and column."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"runpod-spec is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"


def as_pods(spec) -> list[dict] | None:
    """A spec is one object (one pod) or an array (the index is the run index)."""
    if isinstance(spec, dict):
        return [spec]
    if isinstance(spec, list):
        return spec
    return None


# The variables Sagan splices into every pod's env once the code is tested (SPEC §5.7): the
# only change to an approved spec that needs no new approval.
GIT_ENV = ("SAGAN_GIT_BRANCH", "SAGAN_GIT_COMMIT", "SAGAN_EPS_BRANCH", "SAGAN_EPS_COMMIT_SHA")


def without_git_env(spec) -> list[dict]:
    """The spec's pods without the spliced branch/commit variables, for comparing a stored
    spec with the approved one."""
    cleaned = []
    for pod in as_pods(spec) or []:
        pod = dict(pod)
        pod["env"] = {k: v for k, v in (pod.get("env") or {}).items() if k not in GIT_ENV}
        cleaned.append(pod)
    return cleaned


def pod_noun(account: str | None) -> str:
    """What a person calls the pod in a note: a local pod is a process on this machine, not RunPod's."""
    return "Local pod" if account == "local" else "RunPod pod"


def _int_field(pod: dict, name: str, where: str, problems: list[str], *, minimum: int,
               required: bool = False) -> None:
    if name not in pod:
        if required:
            problems.append(f"{where}.{name}: required")
        return
    value = pod[name]
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{where}.{name}: must be a whole number, got {json.dumps(value)[:40]}")
    elif value < minimum:
        problems.append(f"{where}.{name}: must be at least {minimum}, got {value}")


def validate(spec, account: str | None = None, allowed_secrets: list[str] | None = None) -> SpecCheck:
    """Check a parsed spec; returns the pods, every problem, and unknown fields.

    `account` is the experiment's RunPod account, which the policy must allow;
    `allowed_secrets`, when given, the pod-secret allowlist every `secrets` name must be on.
    """
    problems: list[str] = []
    unknown: list[str] = []
    pods = as_pods(spec)
    if pods is None:
        return SpecCheck([], ["runpod-spec must be a JSON object (one pod) or an array of pods"], [])
    if not pods:
        return SpecCheck([], ["runpod-spec array is empty"], [])
    if len(pods) > 64:
        problems.append(f"runpod-spec has {len(pods)} pods; the limit is 64")
    names = set()
    for index, pod in enumerate(pods):
        where = f"[{index}]"
        if not isinstance(pod, dict):
            problems.append(f"{where}: must be an object")
            continue
        unknown += [f"{where}.{k}" for k in pod if k not in KNOWN_FIELDS]
        name = pod.get("name")
        if name is not None:
            if not isinstance(name, str) or not name.strip() or len(name) > 120:
                problems.append(f"{where}.name: must be text of 1–120 characters")
            elif name in names:
                problems.append(f"{where}.name: duplicate pod name {name!r}")
            names.add(name)
        gpu = None
        if "gpuType" not in pod:
            problems.append(f"{where}.gpuType: required")
        else:
            gpu = find_gpu(pod["gpuType"])
            if gpu is None:
                problems.append(f"{where}.gpuType: unknown GPU {json.dumps(pod['gpuType'])}; known: {known_gpu_names()}")
        _int_field(pod, "gpuCount", where, problems, minimum=1)
        _int_field(pod, "volumeGb", where, problems, minimum=0)
        _int_field(pod, "containerDiskGb", where, problems, minimum=1)
        _int_field(pod, "estimatedMinutes", where, problems, minimum=1)
        _int_field(pod, "keepAliveMinutes", where, problems, minimum=0)
        _int_field(pod, "bootstrapSilenceMinutes", where, problems, minimum=1)
        if "cloudType" in pod and pod["cloudType"] not in registry.CLOUD_TYPES:
            problems.append(f"{where}.cloudType: must be one of {', '.join(registry.CLOUD_TYPES)}")
        if "env" in pod:
            env = pod["env"]
            if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
                problems.append(f"{where}.env: must map names to string values")
        for name_field in ("dockerArgs", "image"):
            if name_field in pod and not isinstance(pod[name_field], str):
                problems.append(f"{where}.{name_field}: must be a string")
        if "secrets" in pod:
            secrets = pod["secrets"]
            if not isinstance(secrets, list) or not all(
                    isinstance(s, str) and s and set(s) <= SECRET_NAME_CHARS for s in secrets):
                problems.append(f"{where}.secrets: must be a list of environment variable names like HF_TOKEN")
            elif allowed_secrets is not None:
                from services.pod_secrets import problems as secret_problems  # cycle: pod_secrets → spec
                problems += secret_problems(secrets, where, allowed_secrets)
        _check_config(pod.get("config"), where, problems)
        if "substitution_policy" in pod:
            _check_policy(pod, gpu, where, problems, account)
        if "consolidation" in pod:
            # Never silently ignored: Sagan does not merge pods, so a plan that counts on it is
            # told so before approval rather than dispatched as if it had been honoured.
            problems.append(f"{where}.consolidation: not supported — Sagan never merges pods onto a larger "
                            "GPU; remove the field (each pod runs as specified, and substitution_policy "
                            "lists the GPUs it may move to)")
    return SpecCheck(pods, problems, unknown)


def _check_config(config, where: str, problems: list[str]) -> None:
    if config is None:
        return
    if not isinstance(config, dict):
        problems.append(f"{where}.config: must be an object")
        return
    if "command" in config and not isinstance(config["command"], str):
        problems.append(f"{where}.config.command: must be text")
    artifacts = config.get("artifacts")
    if artifacts is not None:
        if not isinstance(artifacts, list):
            problems.append(f"{where}.config.artifacts: must be a list of paths or URIs")
            return
        for i, item in enumerate(artifacts):
            if not _artifact_ok(item):
                problems.append(f"{where}.config.artifacts[{i}]: must be a path or glob relative to the "
                                f"checkout (runs/x/*.json), a /workspace/… path, or an hf://, wandb://, "
                                f"https:// or repo:// URI")


REMOTE_ARTIFACTS = ("hf://", "wandb://", "repo://", "https://")


def _artifact_ok(item) -> bool:
    """A declared artifact: a remote URI (recorded as a link), or a path the bootstrap uploads —
    relative to the checkout or under /workspace/, without `..`, on one line."""
    if not isinstance(item, str) or not item.strip() or len(item) > 500:
        return False
    if item.startswith(REMOTE_ARTIFACTS):
        return True
    if any(c in item for c in "\n\r\0") or item.startswith("-") or ".." in item.split("/"):
        return False
    return item.startswith("/workspace/") or not item.startswith("/")


def _check_policy(pod: dict, gpu: Gpu | None, where: str, problems: list[str],
                  account: str | None) -> None:
    policy = pod["substitution_policy"]
    base = f"{where}.substitution_policy"
    if not isinstance(policy, dict):
        problems.append(f"{base}: must be an object")
        return
    gpu_policy = policy.get("gpuType")
    if gpu_policy is not None:
        allowed = gpu_policy.get("allowed") if isinstance(gpu_policy, dict) else None
        if not isinstance(allowed, list) or not allowed:
            problems.append(f"{base}.gpuType.allowed: must be a non-empty list of GPU names")
        else:
            allowed_gpus = []
            for i, name in enumerate(allowed):
                found = find_gpu(name)
                if found is None:
                    problems.append(f"{base}.gpuType.allowed[{i}]: unknown GPU {json.dumps(name)}; known: {known_gpu_names()}")
                else:
                    allowed_gpus.append(found)
            if gpu is not None and allowed_gpus and gpu not in allowed_gpus:
                problems.append(f"{base}.gpuType.allowed: does not include the spec's own GPU {pod['gpuType']!r}")
            min_vram = gpu_policy.get("min_vram_gb")
            if min_vram is not None:
                if isinstance(min_vram, bool) or not isinstance(min_vram, (int, float)) or min_vram <= 0:
                    problems.append(f"{base}.gpuType.min_vram_gb: must be a positive number")
                elif allowed_gpus and not any(g.vram_gb >= min_vram for g in allowed_gpus):
                    problems.append(f"{base}.gpuType.min_vram_gb: no allowed GPU has {min_vram} GB")
                elif gpu is not None and gpu.vram_gb < min_vram:
                    problems.append(f"{base}.gpuType.min_vram_gb: the spec's own GPU {pod['gpuType']!r} has "
                                    f"{gpu.vram_gb} GB, less than {min_vram}")
    count_policy = policy.get("gpuCount")
    if count_policy is not None:
        low, high = (count_policy.get("min"), count_policy.get("max")) if isinstance(count_policy, dict) else (None, None)
        if not isinstance(count_policy, dict) or not all(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1) for v in (low, high)):
            problems.append(f"{base}.gpuCount: min and max must be whole numbers ≥ 1")
        elif low is not None and high is not None and low > high:
            problems.append(f"{base}.gpuCount: min {low} is above max {high}")
        elif isinstance(pod.get("gpuCount"), int) and not ((low or 1) <= pod["gpuCount"] <= (high or pod["gpuCount"])):
            problems.append(f"{base}.gpuCount: the spec's own gpuCount {pod['gpuCount']} is outside {low}–{high}")
    for disk in ("volumeGb", "containerDiskGb"):
        disk_policy = policy.get(disk)
        if disk_policy is not None and (not isinstance(disk_policy, dict) or not isinstance(disk_policy.get("min", 0), int)):
            problems.append(f"{base}.{disk}: must be {{\"min\": <GB>}}")
    for key, choices, own in (("cloudType", registry.CLOUD_TYPES, pod.get("cloudType")),
                              ("account", ACCOUNTS, account)):
        sub = policy.get(key)
        if sub is None:
            continue
        if not isinstance(sub, dict) or not isinstance(sub.get("allowed", []), list):
            problems.append(f"{base}.{key}: must be {{\"prefer\": …, \"allowed\": […]}}")
            continue
        allowed = sub.get("allowed") or []
        for i, value in enumerate(allowed):
            if value not in choices:
                problems.append(f"{base}.{key}.allowed[{i}]: {json.dumps(value)} is not one of {', '.join(choices)}")
        prefer = sub.get("prefer")
        if prefer is not None and allowed and prefer not in allowed:
            problems.append(f"{base}.{key}.prefer: {prefer!r} is not in allowed")
        if own is not None and allowed and own not in allowed:
            problems.append(f"{base}.{key}.allowed: does not include the spec's own {key} {own!r}")
    dc = policy.get("dataCenterId")
    if dc is not None:
        allowed = dc.get("allowed") if isinstance(dc, dict) else None
        if not (allowed == "any" or (isinstance(allowed, list) and all(isinstance(x, str) for x in allowed))):
            problems.append(f"{base}.dataCenterId.allowed: must be \"any\" or a list of data-center ids")
