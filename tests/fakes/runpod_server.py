"""A loopback fake of RunPod's REST v2 API, speaking its wire format: create, get, list,
actions, delete, logs, the account's SSH keys, problem+json errors, 429 with `RateLimit`
headers.

Time inside the fake is its own: `advance(seconds)` moves it, nothing sleeps. A new pod is
PROVISIONING for `provisioning_seconds`, STARTING for `starting_seconds`, then RUNNING
with a `cost` and `runtime.uptime`. Tests script trouble:

- `no_capacity("NVIDIA H100 80GB HBM3")` — creates for that GPU answer 400 whose only sign
  of capacity is the `detail` ("no longer any instances available…"; `cloud=` narrows it,
  `detail=` words it otherwise, `times=` limits it);
- `no_balance(scope=None)` — creates (of that account) answer 402: the balance is too low
  to deploy;
- `no_pool_access("NVIDIA H200")` — creates for that GPU (and `cloud=`) answer 403: the
  account cannot use that pool;
- `refuse_create(gpu_id, detail, status=400)` — creates for that GPU answer a rule of the
  handler's (a 400 that matches the contract but is refused for this candidate);
- `fail_after_create(times=1)` — the next create makes the pod, then answers 500;
- `listing_lag = N` — a new pod is absent from `GET /v2/pods` for N seconds;
- `vanish(pod_id, after=N)` or `vanish_after = N` — the pod answers 404 and leaves lists;
- `exit_pod(pod_id, error=False)` or `run_seconds = N` — the pod goes EXITED (or ERROR);
- `restart_on_exit = True` — like RunPod, a container whose command ends by itself is
  started again on the same pod (PROVISIONING → RUNNING, `FakePod.restarts` counts it);
  only a `stop` action leaves a pod EXITED;
- `rate_limit(k, reset=30)` — the next k requests answer 429 with `RateLimit` headers;
- `fail_next(k, status=500, method=None)` — the next k requests (of that method) answer
  `status` with a problem body, before anything else is looked at;
- `delay_next(seconds)` — the next request is answered after a real sleep (for timeouts);
- `hold_after_create(seconds, skip=0)` — a create (after `skip` more) makes the pod, then
  really sleeps before answering (a worker killed meanwhile never learns the pod's id);
- `scope_outage("team")` — the account lists no pods at all and answers 404 for each one
  (what a key in the wrong team scope, or an outage of the listing, looks like);
- `report_cost = False` — pods answer `"cost": null` (a price nobody told us);
- `add_log(pod_id, *lines, source="container"|"system")` — the pod's container (or its
  host) prints lines, stamped with fake time; `log_hold_seconds` — how long (real
  seconds) the stream of a RUNNING pod stays open after its backfill, with keep-alive
  comments;
- `ssh_keys[scope]` — the account's registered SSH public keys (`PUT /v2/account/ssh-keys`).

What RunPod publishes, checked 2026-12-02 against RunPod's API reference v2
(docs.runpod.io/api-reference-v2 — "Create a pod", "List pods", "Stream pod logs",
"Replace registered SSH public keys", "List registered SSH public keys", read through the
`search` tool, and the OpenAPI document those pages are built from, runpod/docs
`api-reference-v2/openapi.json` at a900806 of 2026-08-20), and how the fake follows it:

- Create's own table of failures: 422 — the body does not match the contract, `errors`
  lists each violation: fix the request, never retry; 400 — the body matches the contract
  but was refused, by a cross-field rule or because that GPU and data center could not be
  placed: try the next candidate; 402 — insufficient balance: stop, no candidate will
  succeed; 403 — the account cannot access the requested pool: skip the candidate; 429 —
  back off (`Retry-After`); 5xx — transient: retry the same candidate with back-off.
  Capacity "carries no machine-readable code of its own — only a human-readable
  `detail`", and "if every candidate returns 400, read the last detail as a problem with
  the request". The fake answers capacity as that 400, 402 and 403 as the scenarios above.
- The error body (`ErrorResponse`) is `{"title", "status", "detail", "errors"?}` with
  `errors` an array of strings, e.g. `"$: additional properties 'bogus' not allowed"`;
  there is no `type` or `code`. The create body allows no unknown field (`unevaluated`/
  `additionalProperties: false`, also inside `gpu`, `mounts` and `mounts.persistent`), and
  `mounts.persistent.size` has `minimum: 10` ("Upstream enforces a 10 GB floor"): the fake
  answers both with 422 and such strings (only the additional-properties wording is
  published; the fake's other wordings are its own). `disk` and `gpu.count` are at least 1,
  `cloud` is SECURE or COMMUNITY, `name` at least one character, `image` required.
- `GET /v2/pods` returns every pod of the account in one `{"pods": [...]}`: its only
  parameter is `includeClusterPods` (cluster member pods are left out by default). There
  is no name filter and no cursor: the fake ignores any other query and records it.
- A pod's `ssh` is `{"proxy", "direct"}`, each null or `{"host", "port", "username",
  "command"}`: the proxy once the pod has a machine (null while provisioning), `direct`
  only with `22/tcp` in `ports` on a running pod. `startSsh` injects the account's
  registered keys as `PUBLIC_KEY` — "with none registered the flag does nothing and the pod
  has no SSH access", whatever `ssh` reports; keys registered later reach only pods created
  afterwards. The fake keeps per pod the keys it got (`FakePod.public_keys`).
- `PUT /v2/account/ssh-keys` with `{"keys": [...]}` replaces the whole set (`[]` removes
  all); each key must match `^(ssh|ecdsa|sk)-[^\\s]+ [^\\s]+([ \\t][^\\n\\r]*)?$`, else 422.
  `GET` answers `{"keys": [...]}`.
- Logs: `GET /v2/pods/{id}/logs` is server-sent events whose `data` is `{"source":
  "container"|"system", "line", "ts"}` ("system — host lifecycle/userlogs stream"), `id`
  the event's `ts`; `source` omitted gives both; `tail` (default 100, 0..5000) is ignored
  when `since` or `Last-Event-ID` is sent. It stays open after the backfill: the fake keeps
  a RUNNING pod's stream open for `log_hold_seconds`. Not published, assumed by the fake:
  the stream of a pod that is not running ends after the backfill, a terminated pod's logs
  answer 404, and a `tail` out of range is a 400 naming `tail`.
- Not published and kept from earlier readings (2026-12-01: "Environment variables",
  "Connect to a Pod with SSH", runpodctl): at most 50 environment variables per pod, a 400
  beyond; no `args` limit is published and Docker's practical one is a few kB, so the fake
  refuses `args` over 8 kB with a 400; RunPod's edge has refused default SDK user agents at
  times (`refuse_user_agents`: substrings answered 403 before authentication); an unknown
  GPU type is a 400 (the schema lists no GPU ids).

Auth works like RunPod's accounts: `team_key` sees the team's pods (v2 scopes a key to its
team; a team header, if sent, must carry `team_id`, and with `team_header_required` the key
without it lands in an empty default scope); `personal_key` sees its own; a team header sent
with the personal key is refused (403); any other key gets 401. `requests` records every
call.
"""
from __future__ import annotations

import itertools
import json
import re
import secrets
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CAPACITY_DETAIL = ("There are no longer any instances available with the requested specifications. "
                   "Please refresh and try again.")
BALANCE_DETAIL = "Insufficient balance: add credit to deploy this pod."
POOL_DETAIL = "Your account cannot access the requested pool."
# The create body's contract (CreatePodRequest): every field it may carry, at each level.
CREATE_FIELDS = {"name", "image", "args", "disk", "ports", "env", "registry", "cloud", "cpu", "dataCenterIds",
                 "globalNetworking", "gpu", "mounts", "startJupyter", "startSsh", "templateId"}
GPU_FIELDS = {"id", "count", "allowedCudaVersions", "minCudaVersion"}
MOUNT_FIELDS = {"persistent", "network"}
PERSISTENT_FIELDS = {"size", "path"}
MIN_PERSISTENT_GB = 10
SSH_KEY_PATTERN = re.compile(r"^(ssh|ecdsa|sk)-[^\s]+ [^\s]+([ \t][^\n\r]*)?$")
KNOWN_GPUS = {  # provider id → USD per GPU-hour the fake bills
    "NVIDIA H100 80GB HBM3": 2.99, "NVIDIA H200": 3.99, "NVIDIA A100-SXM4-80GB": 1.89,
    "NVIDIA L40S": 0.86, "NVIDIA GeForce RTX 4090": 0.69,
}
ACTIONS = {  # status → actions RunPod allows from it; anything else is 409
    "PROVISIONING": {"stop", "terminate"}, "STARTING": {"stop", "terminate"},
    "RUNNING": {"stop", "restart", "terminate"}, "EXITED": {"start", "terminate"},
    "ERROR": {"start", "terminate"}, "TERMINATED": set(),
}
_ids = itertools.count(1)


@dataclass
class FakePod:
    id: str
    name: str
    scope: str
    body: dict
    created_at: float
    started_at: float            # when the current PROVISIONING → RUNNING progression began
    forced: str | None = None    # EXITED | ERROR | TERMINATED once something put it there
    vanish_at: float | None = None
    visible_at: float = 0.0      # lists include it from this time on
    restarts: int = 0            # times the container was started again after exiting by itself
    data_center_id: str = "US-KS-2"
    log: list = field(default_factory=list)  # (ts, source, line) in the order printed
    public_keys: list = field(default_factory=list)  # what startSsh put in the pod (none: no SSH access)


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict
    headers: dict
    body: dict | None
    status: int = 0


@dataclass
class FakeRunPod:
    """The server; use as a context manager or call start()/stop()."""

    team_key: str = "rpa_TEAMKEY0000000000000000"
    personal_key: str = "rpa_PERSONALKEY00000000000"
    team_id: str = "team_fake_001"
    team_header: str = "X-Team-Id"
    team_header_required: bool = False
    provisioning_seconds: float = 10.0
    starting_seconds: float = 20.0
    run_seconds: float | None = None     # RUNNING pods exit by themselves after this long
    listing_lag: float = 0.0
    vanish_after: float | None = None    # new pods vanish this long after creation
    restart_on_exit: bool = False        # a container that exits by itself is started again
    report_cost: bool = True             # False: `cost` is null (a price RunPod does not tell)
    max_env: int = 50
    max_args_bytes: int = 8192
    refuse_user_agents: tuple = ()
    log_hold_seconds: float = 5.0
    requests: list[RecordedRequest] = field(default_factory=list)
    pods: dict[str, FakePod] = field(default_factory=dict)
    ssh_keys: dict[str, list[str]] = field(default_factory=dict)  # scope → registered public keys

    def __post_init__(self):
        self._lock = threading.RLock()
        self._now = 0.0
        self._refusals: list[dict] = []   # create refusals by GPU: capacity (400) and pool access (403)
        self._no_balance: int | None = 0  # creates still answered 402 (None: every one)
        self._no_balance_scope: str | None = None
        self._fail_after_create = 0
        self._fail_after_create_status = 500
        self._rate_limited: deque = deque()
        self._failures: deque = deque()
        self._delays: deque = deque()
        self._holds: deque = deque()  # per coming create: seconds to hold its answer (0: none)
        self._server = None
        self._outages: set[str] = set()

    # --- time --------------------------------------------------------------------------
    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move the fake's clock forward (status progression, lag, vanishing, uptime)."""
        with self._lock:
            self._now += seconds

    # --- scripting ---------------------------------------------------------------------
    def no_capacity(self, gpu_id: str, *, cloud: str | None = None, times: int | None = None,
                    detail: str = CAPACITY_DETAIL) -> "FakeRunPod":
        """Creates for this GPU (and cloud) answer 400 with only RunPod's capacity `detail`, `times`
        times or always."""
        return self.refuse_create(gpu_id, detail, cloud=cloud, times=times)

    def no_pool_access(self, gpu_id: str, *, cloud: str | None = None, times: int | None = None) -> "FakeRunPod":
        """Creates for this GPU (and cloud) answer 403: the account cannot use that pool."""
        return self.refuse_create(gpu_id, POOL_DETAIL, status=403, cloud=cloud, times=times)

    def refuse_create(self, gpu_id: str, detail: str, *, status: int = 400, cloud: str | None = None,
                      times: int | None = None) -> "FakeRunPod":
        """Creates for this GPU (and cloud) that match the contract answer `status` with `detail`:
        a 400 is a rule the handler applies to this candidate (or, worded so, capacity)."""
        title = {400: "Bad Request", 403: "Forbidden"}.get(status, "Error")
        with self._lock:
            self._refusals.append({"gpu": gpu_id, "cloud": cloud, "status": status, "title": title,
                                   "times": times, "detail": detail})
        return self

    def no_balance(self, times: int | None = None, *, scope: str | None = None) -> "FakeRunPod":
        """The next `times` creates (or every one) of the `scope` account (or any) answer 402:
        the balance is too low to deploy."""
        with self._lock:
            self._no_balance, self._no_balance_scope = times, scope
        return self

    def fail_after_create(self, times: int = 1, status: int = 500) -> "FakeRunPod":
        """The next `times` creates make the pod, then answer `status` anyway."""
        with self._lock:
            self._fail_after_create, self._fail_after_create_status = times, status
        return self

    def rate_limit(self, count: int, *, reset: int = 30, limit: int = 100,
                   retry_after: int | None = None) -> "FakeRunPod":
        """The next `count` requests answer 429 with `RateLimit: limit=…, remaining=0, reset=…`."""
        with self._lock:
            self._rate_limited.extend([{"reset": reset, "limit": limit, "retry_after": retry_after}] * count)
        return self

    def fail_next(self, count: int = 1, status: int = 500, method: str | None = None, *,
                  title: str = "Internal Server Error", detail: str = "Something went wrong.",
                  errors: list[str] | None = None) -> "FakeRunPod":
        """The next `count` requests (of `method`, if given) answer `status` with a problem body."""
        with self._lock:
            self._failures.extend([{"status": status, "method": method, "title": title,
                                    "detail": detail, "errors": errors}] * count)
        return self

    def delay_next(self, seconds: float, count: int = 1) -> "FakeRunPod":
        """Answer the next `count` requests after really sleeping (to trip client timeouts)."""
        with self._lock:
            self._delays.extend([seconds] * count)
        return self

    def hold_after_create(self, seconds: float, *, skip: int = 0) -> "FakeRunPod":
        """The create after the next `skip` ones makes its pod, then sleeps `seconds` before answering."""
        with self._lock:
            self._holds.extend([0.0] * skip + [seconds])
        return self

    def vanish(self, pod_id: str, after: float = 0.0) -> None:
        """The pod answers 404 and leaves lists `after` seconds from now."""
        with self._lock:
            self.pods[pod_id].vanish_at = self._now + after

    def exit_pod(self, pod_id: str, *, error: bool = False) -> None:
        """The pod's container stops: EXITED (or ERROR), no cost, no runtime — or, with
        `restart_on_exit`, the container is started again on the same pod."""
        with self._lock:
            self._container_ended(self.pods[pod_id], "ERROR" if error else "EXITED")

    def _container_ended(self, pod: FakePod, status: str) -> None:
        if self.restart_on_exit:
            pod.forced, pod.started_at = None, self._now
            pod.restarts += 1
        else:
            pod.forced = status

    def scope_outage(self, scope: str = "team", on: bool = True) -> None:
        """The account lists nothing and answers 404 for every pod (or, on=False, recovers)."""
        with self._lock:
            (self._outages.add if on else self._outages.discard)(scope)

    def add_pod(self, name: str, *, scope: str = "team", gpu_id: str = "NVIDIA A100-SXM4-80GB",
                status: str | None = None) -> str:
        """A pod that exists at the provider without a create call (e.g. an orphan)."""
        body = {"name": name, "image": "runpod/pytorch", "gpu": {"id": gpu_id, "count": 1}, "cloud": "SECURE",
                "ports": ["22/tcp"]}
        with self._lock:
            pod = self._new_pod(body, scope)
            pod.visible_at = self._now
            if status in ("EXITED", "ERROR", "TERMINATED"):
                pod.forced = status
            elif status == "RUNNING":
                pod.started_at = self._now - self.provisioning_seconds - self.starting_seconds
            return pod.id

    def add_log(self, pod_id: str, *lines: str, source: str = "container") -> None:
        """The pod prints `lines`; each gets a distinct RFC 3339 time (fake time + 1 ms each)."""
        with self._lock:
            pod = self.pods[pod_id]
            for line in lines:
                at = self._now + len(pod.log) / 1000
                pod.log.append((_iso_ms(at), source, line))

    def status_of(self, pod_id: str) -> str:
        with self._lock:
            return self._status(self.pods[pod_id])

    def requests_to(self, method: str, path_prefix: str = "/v2/pods") -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == method and r.path.startswith(path_prefix)]

    # --- the model -----------------------------------------------------------------------
    def _new_pod(self, body: dict, scope: str) -> FakePod:
        pod_id = f"{secrets.token_hex(4)}{next(_ids):06d}"
        pod = FakePod(pod_id, body["name"], scope, body, self._now, self._now,
                      visible_at=self._now + self.listing_lag,
                      vanish_at=None if self.vanish_after is None else self._now + self.vanish_after)
        self.pods[pod_id] = pod
        return pod

    def _gone(self, pod: FakePod) -> bool:
        return pod.vanish_at is not None and self._now >= pod.vanish_at

    def _status(self, pod: FakePod) -> str:
        if pod.forced:
            return pod.forced
        elapsed = self._now - pod.started_at
        if elapsed < self.provisioning_seconds:
            return "PROVISIONING"
        if elapsed < self.provisioning_seconds + self.starting_seconds:
            return "STARTING"
        if self.run_seconds is not None and elapsed >= self.provisioning_seconds + self.starting_seconds + self.run_seconds:
            self._container_ended(pod, "EXITED")
            return pod.forced or "PROVISIONING"  # restarted: provisioning again
        return "RUNNING"

    def _view(self, pod: FakePod) -> dict:
        status = self._status(pod)
        gpu = pod.body.get("gpu") or {}
        price = KNOWN_GPUS.get(gpu.get("id"), 1.0) * int(gpu.get("count") or 1)
        running = status == "RUNNING"
        uptime = int(self._now - pod.started_at - self.provisioning_seconds - self.starting_seconds)
        return {
            "id": pod.id, "name": pod.name, "status": status,
            "actions": sorted(ACTIONS[status]),
            "cost": (price if status not in ("EXITED", "TERMINATED") else 0) if self.report_cost else None,
            "dataCenterId": pod.data_center_id, "cudaVersion": "12.4",
            "createdAt": _iso(pod.created_at), "startedAt": _iso(pod.started_at) if running else None,
            "image": pod.body.get("image"),
            "gpu": {"id": gpu.get("id"), "count": gpu.get("count")},
            "ports": list(pod.body.get("ports") or []),
            "ssh": self._ssh(pod, status),
            "runtime": {"uptime": max(uptime, 0), "gpus": [{"util": 97, "memoryUtil": 61}],
                        "cpu": 12.5, "memory": 40.1,
                        "ports": [{"private": 22, "public": 10341, "type": "tcp", "ip": "203.0.113.10"}]}
            if running else None,
        }

    @staticmethod
    def _ssh(pod: FakePod, status: str) -> dict:
        """The proxy once the pod has a machine; the direct connection on a running pod with 22/tcp."""
        proxy = None if status == "PROVISIONING" else _endpoint("ssh.runpod.io", 22, f"{pod.id}-64410f2e")
        direct = _endpoint("203.0.113.10", 10341, "root") \
            if status == "RUNNING" and "22/tcp" in (pod.body.get("ports") or []) else None
        return {"proxy": proxy, "direct": direct}

    def _authorize(self, headers) -> tuple[int, str, str]:
        """(status, scope or problem title, detail)."""
        agent = headers.get("User-Agent") or ""
        if any(word in agent for word in self.refuse_user_agents):
            return 403, "Forbidden", "Request blocked."
        auth = headers.get("Authorization") or ""
        key = auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
        team = headers.get(self.team_header)
        if key and key == self.personal_key:
            if team is not None:
                return 403, "Forbidden", "A team header is not allowed with a personal API key."
            return 200, "personal", ""
        if key and key == self.team_key:
            if team is None:
                # v2: a team key is scoped to its team. A fake set to `team_header_required` plays
                # an account whose key lands in a default scope without the header: no team pods.
                return 200, ("team-default" if self.team_header_required else "team"), ""
            if team != self.team_id:
                return 403, "Forbidden", "The API key is not a member of this team."
            return 200, "team", ""
        return 401, "Unauthorized", "Invalid or missing API key."

    def _contract_errors(self, body: dict) -> list[str]:
        """What the create body's schema refuses (a 422), worded like RunPod's `errors` strings."""
        errors = _unknown("$", body, CREATE_FIELDS)
        if not isinstance(body.get("name"), str) or not body["name"]:
            errors.append("$.name: required, a string of at least 1 character")
        if "templateId" not in body and not isinstance(body.get("image"), str):
            errors.append("$.image: required unless templateId is set")
        for name in ("args", "image", "registry", "templateId"):
            if body.get(name) is not None and not isinstance(body[name], str):
                errors.append(f"$.{name}: expected string")
        if "disk" in body and not _whole(body["disk"], 1):
            errors.append(f"$.disk: must be an integer >= 1 but found {json.dumps(body['disk'])}")
        if "cloud" in body and body["cloud"] not in ("SECURE", "COMMUNITY"):
            errors.append(f"$.cloud: value must be one of 'SECURE', 'COMMUNITY' but found {json.dumps(body['cloud'])}")
        for name in ("ports", "dataCenterIds"):
            if name in body and not (isinstance(body[name], list) and all(isinstance(v, str) for v in body[name])):
                errors.append(f"$.{name}: expected an array of strings")
        if "env" in body and not (isinstance(body["env"], dict) and all(isinstance(v, str) for v in body["env"].values())):
            errors.append("$.env: expected an object of strings")
        for name in ("startSsh", "startJupyter", "globalNetworking"):
            if name in body and not isinstance(body[name], bool):
                errors.append(f"$.{name}: expected boolean")
        gpu = body.get("gpu")
        if gpu is not None:
            if not isinstance(gpu, dict):
                errors.append("$.gpu: expected object")
            else:
                errors += _unknown("$.gpu", gpu, GPU_FIELDS)
                if not isinstance(gpu.get("id"), str):
                    errors.append("$.gpu.id: required, a string")
                if "count" in gpu and not _whole(gpu["count"], 1):
                    errors.append(f"$.gpu.count: must be an integer >= 1 but found {json.dumps(gpu['count'])}")
        mounts = body.get("mounts")
        if mounts is not None:
            if not isinstance(mounts, dict):
                errors.append("$.mounts: expected object")
            else:
                errors += _unknown("$.mounts", mounts, MOUNT_FIELDS)
                persistent = mounts.get("persistent")
                if persistent is not None:
                    errors += _persistent_errors(persistent)
        return errors

    def _rule_errors(self, body: dict) -> str | None:
        """What the handler refuses in a body that matches the contract (a 400), or None."""
        if ("gpu" in body) == ("cpu" in body):
            return "exactly one of gpu or cpu must be set"
        if "gpu" in body and body["gpu"]["id"] not in KNOWN_GPUS:
            return f"gpu.id: unknown GPU type {body['gpu']['id']!r}"
        mounts = body.get("mounts") or {}
        if mounts.get("persistent") is not None and mounts.get("network"):
            return "mounts: at most one of persistent or network may be set"
        if len(body.get("env") or {}) > self.max_env:
            return f"env: at most {self.max_env} environment variables per pod"
        if len(str(body.get("args") or "").encode()) > self.max_args_bytes:
            return "args: too long"
        return None

    def _refusal_for(self, body: dict) -> dict | None:
        """The scripted capacity (400) or pool (403) refusal this create meets, if any."""
        gpu = (body.get("gpu") or {}).get("id")
        for rule in self._refusals:
            if rule["gpu"] == gpu and rule["cloud"] in (None, body.get("cloud") or "SECURE"):
                if rule["times"] is not None:
                    if rule["times"] <= 0:
                        continue
                    rule["times"] -= 1
                return rule
        return None

    def handle(self, method: str, path: str, query: dict, headers, body) -> tuple[int, dict | None, dict]:
        """(status, JSON body or None, extra headers) — all of the API's behaviour."""
        with self._lock:
            if self._rate_limited:
                limit = self._rate_limited.popleft()
                extra = {"RateLimit": f"limit={limit['limit']}, remaining=0, reset={limit['reset']}",
                         "RateLimit-Policy": f"{limit['limit']};w=60"}
                if limit["retry_after"] is not None:
                    extra["Retry-After"] = str(limit["retry_after"])
                return 429, _problem(429, "Too Many Requests", "Rate limit exceeded."), extra
            if self._failures and self._failures[0]["method"] in (None, method):
                failure = self._failures.popleft()
                return failure["status"], _problem(failure["status"], failure["title"], failure["detail"],
                                                   failure["errors"]), {}
            status, scope, detail = self._authorize(headers)
            if status != 200:
                return status, _problem(status, scope, detail), {}

            parts = [p for p in path.split("/") if p]
            if parts == ["v2", "account", "ssh-keys"]:
                return self._account_ssh_keys(method, body, scope)
            if parts[:2] != ["v2", "pods"]:
                return 404, _problem(404, "Not Found", f"No route {path}"), {}
            if len(parts) == 2 and method == "POST":
                return self._create(body, scope)
            if len(parts) == 2 and method == "GET":
                # Its only parameter is includeClusterPods (the fake has no cluster pods): no
                # filter, no cursor; every pod of the scope, whatever else the query says.
                pods = [self._view(p) for p in self.pods.values()
                        if p.scope == scope and scope not in self._outages and not self._gone(p)
                        and self._now >= p.visible_at and self._status(p) != "TERMINATED"]
                return 200, {"pods": pods}, {}
            pod = self.pods.get(parts[2]) if len(parts) >= 3 else None
            if pod is None or pod.scope != scope or self._gone(pod) or scope in self._outages:
                return 404, _problem(404, "Not Found", f"Pod {parts[2] if len(parts) > 2 else ''} not found."), {}
            if len(parts) == 3 and method == "GET":
                return 200, self._view(pod), {}
            if len(parts) == 3 and method == "DELETE":
                pod.forced = "TERMINATED"
                return 204, None, {}
            if len(parts) == 4 and parts[3] == "logs" and method == "GET":
                return self._logs(pod, query, headers)
            if len(parts) == 4 and parts[3] == "action" and method == "POST":
                return self._action(pod, (body or {}).get("action"))
            return 405, _problem(405, "Method Not Allowed", f"{method} {path}"), {}

    def _create(self, body, scope: str):
        if not isinstance(body, dict):
            return 422, _problem(422, "Unprocessable Entity", "Request validation failed.",
                                 ["$: expected object"]), {}
        errors = self._contract_errors(body)
        if errors:
            return 422, _problem(422, "Unprocessable Entity", "Request validation failed.", errors), {}
        rule = self._rule_errors(body)
        if rule:
            return 400, _problem(400, "Bad Request", rule), {}
        if (self._no_balance is None or self._no_balance > 0) and self._no_balance_scope in (None, scope):
            if self._no_balance is not None:
                self._no_balance -= 1
            return 402, _problem(402, "Payment Required", BALANCE_DETAIL), {}
        refusal = self._refusal_for(body)
        if refusal:
            return refusal["status"], _problem(refusal["status"], refusal["title"], refusal["detail"]), {}
        pod = self._new_pod(body, scope)
        if body.get("startSsh") and "PUBLIC_KEY" not in (body.get("env") or {}):
            # startSsh hands the pod the keys registered now; with none, it does nothing.
            pod.public_keys = list(self.ssh_keys.get(scope) or [])
        if self._fail_after_create > 0:
            self._fail_after_create -= 1
            status = self._fail_after_create_status
            return status, _problem(status, "Internal Server Error", "upstream request failed"), {}
        return 201, self._view(pod), {}

    def _account_ssh_keys(self, method: str, body, scope: str):
        """GET: the registered keys; PUT {"keys": [...]}: the whole set replaced."""
        if method == "GET":
            return 200, {"keys": list(self.ssh_keys.get(scope) or [])}, {}
        if method != "PUT":
            return 405, _problem(405, "Method Not Allowed", f"{method} /v2/account/ssh-keys"), {}
        if not isinstance(body, dict):
            return 422, _problem(422, "Unprocessable Entity", "Request validation failed.", ["$: expected object"]), {}
        errors = _unknown("$", body, {"keys"})
        keys = body.get("keys")
        if not isinstance(keys, list):
            errors.append("$.keys: required, an array of strings")
        else:
            errors += [f"$.keys[{i}]: does not match pattern {SSH_KEY_PATTERN.pattern!r}"
                       for i, key in enumerate(keys) if not isinstance(key, str) or not SSH_KEY_PATTERN.match(key)]
        if errors:
            return 422, _problem(422, "Unprocessable Entity", "Request validation failed.", errors), {}
        self.ssh_keys[scope] = list(keys)
        return 200, {"keys": list(keys)}, {}

    def _logs(self, pod: FakePod, query: dict, headers):
        status = self._status(pod)
        if status == "TERMINATED":
            return 404, _problem(404, "Not Found", f"Pod {pod.id} not found."), {}
        source = query.get("source")
        if source not in (None, "container", "system"):
            return 400, _problem(400, "Bad Request", "The request is invalid.",
                                 ["$.source: value must be one of 'container', 'system'"]), {}
        entries = [e for e in pod.log if source is None or e[1] == source]
        cursor = headers.get("Last-Event-ID") or query.get("since")
        if cursor:
            entries = [e for e in entries if e[0] > cursor]
        else:
            try:
                tail = int(query.get("tail", 100))
            except ValueError:
                tail = -1
            if not 0 <= tail <= 5000:
                return 400, _problem(400, "Bad Request", "The request is invalid.",
                                     ["$.tail: must be between 0 and 5000"]), {}
            entries = entries[len(entries) - tail:] if tail else []
        events = [f"id: {ts}\ndata: {json.dumps({'source': src, 'line': line, 'ts': ts})}\n\n"
                  for ts, src, line in entries]
        return 200, _EventStream(events, self.log_hold_seconds if status == "RUNNING" else 0.0), {}

    def _action(self, pod: FakePod, action):
        status = self._status(pod)
        if action not in ("start", "stop", "restart", "terminate"):
            return 400, _problem(400, "Bad Request", f"unknown action {action!r}",
                                 ["$.action: value must be one of 'start', 'stop', 'restart', 'terminate'"]), {}
        if action not in ACTIONS[status]:
            return 409, _problem(409, "Conflict", f"Cannot {action} a pod that is {status}."), {}
        if action == "terminate":
            pod.forced = "TERMINATED"
            return 204, None, {}
        if action == "stop":
            pod.forced = "EXITED"
        else:  # start, restart: provisioning again
            pod.forced, pod.started_at = None, self._now
        return 200, self._view(pod), {}

    # --- serving -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeRunPod":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def _serve(self, method: str):
                parsed = urllib.parse.urlsplit(self.path)
                query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = "not json"
                record = RecordedRequest(method, parsed.path, query, dict(self.headers),
                                         body if isinstance(body, dict) else None)
                with fake._lock:
                    fake.requests.append(record)
                    delay = fake._delays.popleft() if fake._delays else 0
                if delay:
                    time.sleep(delay)
                if body == "not json":
                    status, payload, extra = 400, _problem(400, "Bad Request", "The body is not JSON."), {}
                else:
                    status, payload, extra = fake.handle(method, parsed.path, query, self.headers, body)
                record.status = status
                if isinstance(payload, _EventStream):
                    self._stream(payload)
                    return
                if method == "POST" and parsed.path.rstrip("/") == "/v2/pods":
                    with fake._lock:
                        hold = fake._holds.popleft() if fake._holds else 0
                    if hold:
                        time.sleep(hold)
                data = json.dumps(payload).encode() if payload is not None else b""
                self.send_response(status)
                if payload is not None:
                    self.send_header("Content-Type", "application/problem+json" if status >= 400
                                     else "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in extra.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, stream: "_EventStream"):
                """Server-sent events: the backfill, then keep-alive comments while held open."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    for event in stream.events:
                        self.wfile.write(event.encode())
                    self.wfile.flush()
                    ends = time.monotonic() + stream.hold_seconds
                    while time.monotonic() < ends:
                        time.sleep(0.2)
                        self.wfile.write(b": keep-alive\n\n")
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client read what it wanted and hung up

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

            def do_PUT(self):
                self._serve("PUT")

            def do_DELETE(self):
                self._serve("DELETE")

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that timed out and hung up is part of the script, not an error


@dataclass
class _EventStream:
    events: list[str]
    hold_seconds: float


def _problem(status: int, title: str, detail: str, errors: list[str] | None = None) -> dict:
    """RunPod's ErrorResponse: title, status, detail, and `errors` as strings when there are any."""
    body = {"title": title, "status": status, "detail": detail}
    if errors:
        body["errors"] = [str(e) for e in errors]
    return body


def _unknown(where: str, value: dict, allowed: set) -> list[str]:
    extra = [k for k in value if k not in allowed]
    if not extra:
        return []
    return [f"{where}: additional properties {', '.join(repr(k) for k in extra)} not allowed"]


def _whole(value, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _persistent_errors(persistent) -> list[str]:
    if not isinstance(persistent, dict):
        return ["$.mounts.persistent: expected object"]
    errors = _unknown("$.mounts.persistent", persistent, PERSISTENT_FIELDS)
    if "size" not in persistent or "path" not in persistent:
        errors.append("$.mounts.persistent: missing properties 'size', 'path'")
    if "size" in persistent and not _whole(persistent["size"], MIN_PERSISTENT_GB):
        errors.append(f"$.mounts.persistent.size: must be >= {MIN_PERSISTENT_GB} but found "
                      f"{json.dumps(persistent['size'])}")
    return errors


def _endpoint(host: str, port: int, username: str) -> dict:
    command = f"ssh {username}@{host}" + (f" -p {port}" if port != 22 else "")
    return {"host": host, "port": port, "username": username, "command": command}


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_767_225_600 + seconds))  # 2026-01-01 + fake time


def _iso_ms(seconds: float) -> str:
    whole = int(seconds)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(1_767_225_600 + whole)) + \
        f".{int(round((seconds - whole) * 1000)) % 1000:03d}Z"
