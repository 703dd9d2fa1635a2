"""The `runpod-spec` (SPEC §6.1–6.3): GPU catalogue, validation, substitution candidates.

Validation never throws on the first problem: it returns every problem with the pod
index and field path (`[2].substitution_policy.gpuType.allowed[1]: unknown GPU "B300";
known: …`), so a planner or the owner can fix a spec in one pass. Unknown fields are kept
and listed, not fatal.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from services.core import pod_accounts, registry
from services.dispatch import pod_secrets


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
    return pod_accounts.pod_label(account)


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


MAX_PODS = 64
# The counted fields and the smallest value each may take, in the order problems are listed.
WHOLE_NUMBER_MINIMUMS = (("gpuCount", 1), ("volumeGb", 0), ("containerDiskGb", 1), ("estimatedMinutes", 1),
                         ("keepAliveMinutes", 0), ("bootstrapSilenceMinutes", 1))
CONSOLIDATION_REFUSED = ("consolidation: not supported — Sagan never merges pods onto a larger GPU; remove the "
                         "field or set may_merge_pods to false (each pod runs as specified, and "
                         "substitution_policy lists the GPUs it may move to)")
CONSOLIDATION_FIELDS = {"may_merge_pods", "merge_target_max_gpus_per_pod"}
# RunPod's smallest persistent volume ("Upstream enforces a 10 GB floor", API reference v2):
# a smaller one is refused at create, so a plan asking for one is told at submission.
MIN_VOLUME_GB = 10


def validate(spec, account: str | None = None, allowed_secrets: list[str] | None = None) -> SpecCheck:
    """Check a parsed spec; returns the pods, every problem, and unknown fields.

    `account` is the experiment's pod account, which the policy must allow;
    `allowed_secrets`, when given, the pod-secret allowlist every `secrets` name must be on.
    """
    pods = as_pods(spec)
    if pods is None:
        return SpecCheck([], ["runpod-spec must be a JSON object (one pod) or an array of pods"], [])
    if not pods:
        return SpecCheck([], ["runpod-spec array is empty"], [])
    problems: list[str] = []
    unknown: list[str] = []
    if len(pods) > MAX_PODS:
        problems.append(f"runpod-spec has {len(pods)} pods; the limit is {MAX_PODS}")
    names: set[str] = set()
    for index, pod in enumerate(pods):
        where = f"[{index}]"
        if not isinstance(pod, dict):
            problems.append(f"{where}: must be an object")
            continue
        unknown += [f"{where}.{k}" for k in pod if k not in KNOWN_FIELDS]
        if isinstance(pod.get("consolidation"), dict):
            unknown += [f"{where}.consolidation.{k}" for k in pod["consolidation"] if k not in CONSOLIDATION_FIELDS]
        problems += pod_problems(pod, where, names, account, allowed_secrets)
    return SpecCheck(pods, problems, unknown)


def pod_problems(pod: dict, where: str, names: set[str], account: str | None = None,
                 allowed_secrets: list[str] | None = None) -> list[str]:
    """Every problem of one pod, field by field in a fixed order (so the first problem a planner
    reads does not move). `names` holds the names of the pods before it, and gains this one's."""
    problems = _name_problems(pod.get("name"), where, names)
    gpu = None
    if "gpuType" not in pod:
        problems.append(f"{where}.gpuType: required")
    else:
        gpu = find_gpu(pod["gpuType"])
        if gpu is None:
            problems.append(f"{where}.gpuType: unknown GPU {json.dumps(pod['gpuType'])}; known: {known_gpu_names()}")
    for field, minimum in WHOLE_NUMBER_MINIMUMS:
        _int_field(pod, field, where, problems, minimum=minimum)
    problems += _volume_floor_problems(pod.get("volumeGb"), f"{where}.volumeGb")
    problems += _shape_problems(pod, where)
    if "secrets" in pod:
        problems += _secrets_problems(pod["secrets"], where, allowed_secrets)
    _check_config(pod.get("config"), where, problems)
    if "substitution_policy" in pod:
        _check_policy(pod, gpu, where, problems, account)
    if "consolidation" in pod:
        problems += _consolidation_problems(pod["consolidation"], where)
    return problems


def _consolidation_problems(consolidation, where: str) -> list[str]:
    """The old system's `consolidation` block: `"may_merge_pods": false` says what Sagan does
    anyway (each pod runs as specified), so it is accepted and kept; asking for merging is
    refused, never silently ignored — a plan that counts on it is told so before approval
    rather than dispatched as if it had been honoured."""
    if not isinstance(consolidation, dict):
        return [f"{where}.consolidation: must be an object such as {{\"may_merge_pods\": false}}"]
    merge = consolidation.get("may_merge_pods")
    if merge is True:
        return [f"{where}.{CONSOLIDATION_REFUSED}"]
    problems = []
    if "may_merge_pods" not in consolidation:
        problems.append(f"{where}.consolidation.may_merge_pods: required — say \"may_merge_pods\": false (Sagan "
                        "never merges pods), or remove consolidation")
    elif merge is not False:
        problems.append(f"{where}.consolidation.may_merge_pods: must be false (Sagan never merges pods), "
                        f"got {json.dumps(merge)[:40]}")
    if "merge_target_max_gpus_per_pod" in consolidation:
        _int_field(consolidation, "merge_target_max_gpus_per_pod", f"{where}.consolidation", problems, minimum=1)
    return problems


def _volume_floor_problems(volume, path: str) -> list[str]:
    """A persistent volume is none (0) or at least RunPod's floor."""
    if isinstance(volume, int) and not isinstance(volume, bool) and 0 < volume < MIN_VOLUME_GB:
        return [f"{path}: RunPod's smallest persistent volume is {MIN_VOLUME_GB} GB; use 0 (none) or at least "
                f"{MIN_VOLUME_GB}, got {volume}"]
    return []


def _name_problems(name, where: str, names: set[str]) -> list[str]:
    """A pod's optional name: 1–120 characters of text, unique within the spec."""
    if name is None:
        return []
    problems = []
    if not isinstance(name, str) or not name.strip() or len(name) > 120:
        # Not remembered: a list or object name cannot go in a set (it was a 500), and only a
        # valid name can be a duplicate of another.
        problems.append(f"{where}.name: must be text of 1–120 characters")
    elif name in names:
        problems.append(f"{where}.name: duplicate pod name {name!r}")
    else:
        names.add(name)
    return problems


def _shape_problems(pod: dict, where: str) -> list[str]:
    """The fields that only need the right type: cloudType, env, dockerArgs and image."""
    problems = []
    if "cloudType" in pod and pod["cloudType"] not in registry.CLOUD_TYPES:
        problems.append(f"{where}.cloudType: must be one of {', '.join(registry.CLOUD_TYPES)}")
    if "env" in pod and not _string_map(pod["env"]):
        problems.append(f"{where}.env: must map names to string values")
    for name_field in ("dockerArgs", "image"):
        if name_field in pod and not isinstance(pod[name_field], str):
            problems.append(f"{where}.{name_field}: must be a string")
    return problems


def _string_map(value) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _secrets_problems(secrets, where: str, allowed_secrets: list[str] | None) -> list[str]:
    """A list of environment variable names, each on the allowlist when one is given."""
    if not isinstance(secrets, list) or not all(isinstance(s, str) and s and set(s) <= SECRET_NAME_CHARS
                                                for s in secrets):
        return [f"{where}.secrets: must be a list of environment variable names like HF_TOKEN"]
    if allowed_secrets is None:
        return []
    return pod_secrets.problems(secrets, where, allowed_secrets)


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


@dataclass(frozen=True)
class PolicyOwner:
    """What a substitution policy must include: the pod's own values and the experiment's account."""
    pod: dict
    gpu: Gpu | None
    account: str | None


def _check_policy(pod: dict, gpu: Gpu | None, where: str, problems: list[str],
                  account: str | None) -> None:
    policy = pod["substitution_policy"]
    base = f"{where}.substitution_policy"
    if not isinstance(policy, dict):
        problems.append(f"{base}: must be an object")
        return
    owner = PolicyOwner(pod, gpu, account)
    for key, rule in POLICY_RULES:
        if policy.get(key) is not None:
            problems += rule(policy[key], owner, f"{base}.{key}")


def gpu_type_policy_problems(gpu_policy, owner: PolicyOwner, path: str) -> list[str]:
    """`gpuType`: a non-empty list of known GPUs with the pod's own, and an optional VRAM floor."""
    allowed = gpu_policy.get("allowed") if isinstance(gpu_policy, dict) else None
    if not isinstance(allowed, list) or not allowed:
        return [f"{path}.allowed: must be a non-empty list of GPU names"]
    allowed_gpus, problems = _allowed_gpus(allowed, f"{path}.allowed")
    if owner.gpu is not None and allowed_gpus and owner.gpu not in allowed_gpus:
        problems.append(f"{path}.allowed: does not include the spec's own GPU {owner.pod['gpuType']!r}")
    min_vram = gpu_policy.get("min_vram_gb")
    if min_vram is not None:
        problems += _min_vram_problems(min_vram, allowed_gpus, owner, f"{path}.min_vram_gb")
    return problems


def _allowed_gpus(allowed: list, path: str) -> tuple[list[Gpu], list[str]]:
    """The catalogue entries of the allowed names, and a problem for each unknown one."""
    found, problems = [], []
    for i, name in enumerate(allowed):
        gpu = find_gpu(name)
        if gpu is None:
            problems.append(f"{path}[{i}]: unknown GPU {json.dumps(name)}; known: {known_gpu_names()}")
        else:
            found.append(gpu)
    return found, problems


def _min_vram_problems(min_vram, allowed_gpus: list[Gpu], owner: PolicyOwner, path: str) -> list[str]:
    """A positive number of GB that some allowed GPU has, and the pod's own GPU too."""
    if isinstance(min_vram, bool) or not isinstance(min_vram, (int, float)) or min_vram <= 0:
        return [f"{path}: must be a positive number"]
    if allowed_gpus and not any(g.vram_gb >= min_vram for g in allowed_gpus):
        return [f"{path}: no allowed GPU has {min_vram} GB"]
    if owner.gpu is not None and owner.gpu.vram_gb < min_vram:
        return [f"{path}: the spec's own GPU {owner.pod['gpuType']!r} has {owner.gpu.vram_gb} GB, less than {min_vram}"]
    return []


def gpu_count_policy_problems(count_policy, owner: PolicyOwner, path: str) -> list[str]:
    """`gpuCount`: optional whole-number bounds ≥ 1, in order, around the pod's own count."""
    if not isinstance(count_policy, dict):
        return [f"{path}: min and max must be whole numbers ≥ 1"]
    low, high = count_policy.get("min"), count_policy.get("max")
    if not all(v is None or _whole_at_least_one(v) for v in (low, high)):
        return [f"{path}: min and max must be whole numbers ≥ 1"]
    if low is not None and high is not None and low > high:
        return [f"{path}: min {low} is above max {high}"]
    own = owner.pod.get("gpuCount")
    if isinstance(own, int) and not ((low or 1) <= own <= (high or own)):
        return [f"{path}: the spec's own gpuCount {own} is outside {low}–{high}"]
    return []


def _whole_at_least_one(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def disk_policy_problems(disk_policy, owner: PolicyOwner, path: str) -> list[str]:
    """`volumeGb` and `containerDiskGb`: `{"min": <GB>}`; a volume's minimum respects RunPod's floor."""
    if not isinstance(disk_policy, dict) or not isinstance(disk_policy.get("min", 0), int):
        return [f"{path}: must be {{\"min\": <GB>}}"]
    if path.endswith(".volumeGb"):
        return _volume_floor_problems(disk_policy.get("min"), f"{path}.min")
    return []


def choice_policy_problems(sub, path: str, key: str, choices: list[str], own) -> list[str]:
    """`cloudType` and `account`: `allowed` values among `choices`, `prefer` among them, the pod's own included."""
    if not isinstance(sub, dict) or not isinstance(sub.get("allowed", []), list):
        return [f"{path}: must be {{\"prefer\": …, \"allowed\": […]}}"]
    allowed = sub.get("allowed") or []
    problems = [f"{path}.allowed[{i}]: {json.dumps(value)} is not one of {', '.join(choices)}"
                for i, value in enumerate(allowed) if value not in choices]
    prefer = sub.get("prefer")
    if prefer is not None and allowed and prefer not in allowed:
        problems.append(f"{path}.prefer: {prefer!r} is not in allowed")
    if own is not None and allowed and own not in allowed:
        problems.append(f"{path}.allowed: does not include the spec's own {key} {own!r}")
    return problems


def cloud_type_policy_problems(sub, owner: PolicyOwner, path: str) -> list[str]:
    return choice_policy_problems(sub, path, "cloudType", registry.CLOUD_TYPES, owner.pod.get("cloudType"))


def account_policy_problems(sub, owner: PolicyOwner, path: str) -> list[str]:
    return choice_policy_problems(sub, path, "account", pod_accounts.names(), owner.account)


def data_center_policy_problems(dc, owner: PolicyOwner, path: str) -> list[str]:
    """`dataCenterId`: `allowed` is "any" or a list of data-center ids."""
    allowed = dc.get("allowed") if isinstance(dc, dict) else None
    if allowed == "any" or (isinstance(allowed, list) and all(isinstance(x, str) for x in allowed)):
        return []
    return [f"{path}.allowed: must be \"any\" or a list of data-center ids"]


# One rule per policy key, checked in this order; a key the policy leaves out (or sets to
# null) is not checked.
POLICY_RULES = (
    ("gpuType", gpu_type_policy_problems),
    ("gpuCount", gpu_count_policy_problems),
    ("volumeGb", disk_policy_problems),
    ("containerDiskGb", disk_policy_problems),
    ("cloudType", cloud_type_policy_problems),
    ("account", account_policy_problems),
    ("dataCenterId", data_center_policy_problems),
)
