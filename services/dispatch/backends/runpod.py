"""RunPod accounts (those whose pod-accounts entry names the `runpod` backend) over REST v2 —
see shared reference `runpod-api.md` and, for what RunPod publishes about each call, the
docstring of `tests/fakes/runpod_server.py`.

Retries: reads and actions are retried with exponential back-off on 429, 5xx and
transport errors. Create is not: RunPod can answer 5xx (or time out) after the pod exists
and bills, so a blind retry could make two. Create raises `provider_error` instead and the
provisioner looks the pod up by its unique name after the listing lag. The one exception
is 429, which RunPod answers before doing anything, so create waits it out like the rest.

Create's failures are classed as RunPod's "Create a pod" reference tables them, so the
provisioner can follow that table without reading statuses: 402 (no balance) is
`provider_balance`, 403 (no access to that pool) and 401 `provider_auth`, 422 (the body
breaks the contract) and a 400 that is not capacity `spec_invalid`, a 400 whose `detail`
says capacity `provider_capacity`, 5xx and timeouts `provider_error`.

A 429 waits as long as the `Retry-After` or `RateLimit: …, reset=<s>` header says, unless
that is longer than `max_rate_limit_wait` (a daily quota), in which case it fails at once
rather than hold a worker for an hour.
"""
from __future__ import annotations

import email.utils
import json as json_lib
import re
import os
import time
import urllib.parse
from functools import lru_cache
from typing import Callable

import httpx

from config import VERSION
from services.core.redact import redact
from services.core.pod_accounts import PodAccount
from services.dispatch.backends.base import (
    BackendError,
    LogLine,
    PodBackend,
    PodRequest,
    ProviderPod,
    registers_backend,
    setting,
)

# RunPod's capacity wording varies by API and release; these all mean "try elsewhere".
_CAPACITY = re.compile(
    r"no longer any instances available|no instances? (?:are |is )?(?:currently )?available"
    r"|not (?:have )?enough (?:free )?gpus|insufficient capacity|out of capacity|no capacity"
    r"|zero gpu pods|could not find any pods with required specifications", re.IGNORECASE)
# …and when the wording is new, the problem's class (`type`, `code`, `errorClass`) may say it.
_CAPACITY_CLASS = re.compile(r"capacity|no[-_ ]?instances|out[-_ ]?of[-_ ]?stock|insufficient[-_ ]?(?:gpus?|resources)"
                             r"|supply|unavailable[-_ ]?gpu", re.IGNORECASE)
# RunPod's edge has refused default HTTP-library user agents: send a browser-like one.
DEFAULT_USER_AGENT = f"Mozilla/5.0 (X11; Linux x86_64) sagan/{VERSION}"
_RESET = re.compile(r"(?:\breset\s*=\s*|;\s*t\s*=\s*)(\d+(?:\.\d+)?)", re.IGNORECASE)


# The logs endpoint is a live stream: it sends its backfill, then keeps the connection open
# for new lines (with keep-alive comments), so a reader must decide when it has read enough.
LOG_IDLE_SECONDS = 1.5        # no new data event for this long: the backfill is over
LOG_DEADLINE_SECONDS = 15.0   # never hold a worker longer than this for one read
LOG_MAX_TAIL = 5000           # RunPod's maximum `tail`


class RunPodBackend:
    """One RunPod account. Thread-safe for use from one worker at a time per instance."""

    def __init__(self, account: str, api_key: str, base_url: str, team_id: str | None = None, *,
                 team_header: str = "", user_agent: str = DEFAULT_USER_AGENT, timeout: float = 30.0, max_retries: int = 3,
                 backoff_seconds: float = 1.0, max_backoff_seconds: float = 30.0,
                 max_rate_limit_wait: float = 120.0, sleep: Callable[[float], None] = time.sleep,
                 transport: httpx.BaseTransport | None = None):
        self.name = account
        self._api_key = api_key
        self._sleep = sleep
        self.max_retries = max_retries
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.max_rate_limit_wait = max_rate_limit_wait
        headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json",
                   "User-Agent": user_agent or DEFAULT_USER_AGENT}
        # REST v2 documents no team header: a team's pods are reached with an API key made in
        # that team. A header is sent only when the owner configured one (RUNPOD_TEAM_HEADER)
        # and the account has a team id — only the team account's table entry names one, so
        # never with the personal key: RunPod rejects it there, and a key in the wrong scope
        # silently lists zero pods (the watcher treats an empty account as an incident).
        if team_id and team_header:
            headers[team_header] = team_id
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                    timeout=timeout, transport=transport)

    # --- the interface ---------------------------------------------------------------
    def create(self, request: PodRequest) -> ProviderPod:
        """Create one pod; never retried on 5xx or timeouts (see the module docstring)."""
        body = {
            "name": request.name,
            "image": request.image,
            "args": request.args,
            "gpu": {"id": request.gpu_id, "count": request.gpu_count},
            "cloud": request.cloud,
            "dataCenterIds": list(request.data_center_ids),
            "disk": request.disk_gb,
            "env": {str(k): str(v) for k, v in request.env.items()},
            "ports": list(request.ports),
            "startSsh": "22/tcp" in request.ports,
        }
        if request.volume_gb:
            body["mounts"] = {"persistent": {"size": request.volume_gb, "path": "/workspace"}}
        response = self._request("POST", "/v2/pods", json=body, idempotent=False)
        return self._pod(response)

    def get(self, pod_id: str) -> ProviderPod | None:
        """The pod, or None when RunPod does not know it (404)."""
        response = self._request("GET", f"/v2/pods/{_quote(pod_id)}", allow={404})
        return None if response.status_code == 404 else self._pod(response)

    def list_by_name(self, name: str) -> list[ProviderPod]:
        """Pods with exactly this name: v2 documents no name filter, so list and match here."""
        return [p for p in self._list() if p.name == name]

    def list_all(self, prefix: str = "sagan-") -> list[ProviderPod]:
        """Every pod of the account whose name starts with `prefix`."""
        return [p for p in self._list() if p.name.startswith(prefix)]

    def stop(self, pod_id: str) -> ProviderPod | None:
        """Stop a pod (its volume is kept); a pod already stopped is returned as it is."""
        response = self._request("POST", f"/v2/pods/{_quote(pod_id)}/action", json={"action": "stop"},
                                 allow={404, 409})
        if response.status_code == 404:
            return None
        if response.status_code == 409:
            # Not stoppable: fine if it is already down (stop is asked again after restarts).
            pod = self.get(pod_id)
            if pod is None or pod.finished:
                return pod
            raise self._error(response, "POST", "/action stop")
        return self._pod(response)

    def terminate(self, pod_id: str) -> None:
        """Terminate a pod (204); a pod already gone counts as terminated."""
        response = self._request("POST", f"/v2/pods/{_quote(pod_id)}/action",
                                 json={"action": "terminate"}, allow={404, 409})
        if response.status_code == 409:
            pod = self.get(pod_id)
            if pod is not None and pod.status != "TERMINATED":
                raise self._error(response, "POST", "/action terminate")

    def logs(self, pod_id: str, *, tail: int = 100, since: str | None = None,
             clock: Callable[[], float] = time.monotonic) -> list[LogLine] | None:
        """The pod's log lines from `GET /v2/pods/{id}/logs` (server-sent events).

        Each event's `data` is `{"source", "line", "ts"}`. `since` (RFC 3339) takes
        precedence over `tail` on RunPod's side. The stream does not end by itself while the
        pod runs: reading stops once no data event came for LOG_IDLE_SECONDS (keep-alive
        comments do not count), after LOG_DEADLINE_SECONDS, or after `tail` lines.
        Both sources: the container's output and the host's `system` lines (image pulls,
        disk, GPU errors: all that a pod which never started its container has), each line
        keeping its `source`. None when RunPod no longer knows the pod (404)."""
        params: dict = {}
        if since:
            params["since"] = since
        else:
            params["tail"] = max(0, min(int(tail), LOG_MAX_TAIL))
        path = f"/v2/pods/{_quote(pod_id)}/logs"
        lines: list[LogLine] = []
        started = last_data = clock()
        try:
            with self._client.stream("GET", path, params=params, headers={"Accept": "text/event-stream"},
                                     timeout=httpx.Timeout(LOG_DEADLINE_SECONDS, read=LOG_IDLE_SECONDS)) as response:
                if response.status_code == 404:
                    return None
                if response.status_code >= 300:
                    response.read()
                    raise self._error(response, "GET", path)
                data_lines: list[str] = []
                for raw in response.iter_lines():
                    now = clock()
                    if raw == "":  # a blank line ends one event
                        event = _log_event("\n".join(data_lines))
                        data_lines = []
                        if event is not None:
                            lines.append(event)
                            last_data = now
                    elif raw.startswith("data:"):
                        data_lines.append(raw[6:] if raw[5:6] == " " else raw[5:])  # one space is dropped
                    # `id:`, `event:`, `retry:` and `: comment` lines carry nothing we show.
                    if (not since and len(lines) >= params["tail"]) or now - last_data >= LOG_IDLE_SECONDS \
                            or now - started >= LOG_DEADLINE_SECONDS:
                        break
        except httpx.ReadTimeout:
            pass  # the backfill is over and nothing new came: what was read is the answer
        except httpx.TransportError as exc:
            raise BackendError("provider_error", self._redact(
                f"RunPod's log stream could not be read ({exc.__class__.__name__}): GET {path}")) from None
        return lines

    def ssh_keys(self) -> list[str]:
        """The SSH public keys registered on the account (`GET /v2/account/ssh-keys`)."""
        return _keys(self._request("GET", "/v2/account/ssh-keys"))

    def replace_ssh_keys(self, keys: list[str]) -> list[str]:
        """Register exactly `keys` on the account (`PUT /v2/account/ssh-keys` replaces the whole
        set); answers the set RunPod now holds. They reach pods created from now on."""
        return _keys(self._request("PUT", "/v2/account/ssh-keys", json={"keys": list(keys)}))

    def close(self) -> None:
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- HTTP ------------------------------------------------------------------------
    def _list(self) -> list[ProviderPod]:
        """The account's pods. `GET /v2/pods` answers every pod in one list: its only parameter
        is `includeClusterPods` (left at its default, no cluster pods), with no filter and no
        cursor, so nothing else is sent."""
        response = self._request("GET", "/v2/pods")
        data = _json(response)
        items = data.get("pods") if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise BackendError("provider_error", f"RunPod answered the pod list with an unexpected body "
                                                 f"({type(data).__name__})", status=response.status_code)
        return [_pod_from(item) for item in items if isinstance(item, dict)]

    def _request(self, method: str, path: str, *, json: dict | None = None, params: dict | None = None,
                 idempotent: bool = True, allow: frozenset | set = frozenset()) -> httpx.Response:
        """One call with retries; returns a 2xx response or one whose status is in `allow`."""
        attempt = 0
        while True:
            try:
                response = self._client.request(method, path, json=json, params=params)
            except httpx.TransportError as exc:
                if idempotent and attempt < self.max_retries:
                    self._sleep(self._backoff(attempt))
                    attempt += 1
                    continue
                what = "did not answer in time" if isinstance(exc, httpx.TimeoutException) else \
                    f"could not be reached ({exc.__class__.__name__})"
                raise BackendError("provider_error", self._redact(f"RunPod {what}: {method} {path}")) from None
            status = response.status_code
            if status < 300 or status in allow:
                return response
            retryable = status == 429 or (status >= 500 and idempotent)
            if retryable and attempt < self.max_retries and not _is_capacity(response):
                delay = self._retry_delay(response, attempt)
                if delay is not None:
                    self._sleep(delay)
                    attempt += 1
                    continue
            raise self._error(response, method, path)

    def _backoff(self, attempt: int) -> float:
        return min(self.backoff_seconds * (2 ** attempt), self.max_backoff_seconds)

    def _retry_delay(self, response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying, or None when a rate limit resets too late to wait."""
        if response.status_code != 429:
            return self._backoff(attempt)
        hinted = [s for s in (_retry_after(response), _ratelimit_reset(response)) if s is not None]
        if not hinted:
            return self._backoff(attempt)
        delay = max(hinted)
        return None if delay > self.max_rate_limit_wait else max(delay, 0.0)

    def _error(self, response: httpx.Response, method: str, path: str) -> BackendError:
        """A problem+json (or any) error answer as a BackendError with a reason code."""
        status = response.status_code
        title, detail = _problem(response)
        words = " — ".join(part for part in (title, detail) if part) or response.reason_phrase or "no detail"
        if _is_capacity(response):
            reason = "provider_capacity"
        elif status == 402:
            reason = "provider_balance"
        elif status in (401, 403):
            reason = "provider_auth"
        elif status in (400, 422):
            reason = "spec_invalid"
        else:
            reason = "provider_error"
        if status == 429:
            reset = _ratelimit_reset(response) or _retry_after(response)
            if reset is not None:
                words += f" (rate limit resets in {int(reset)} s)"
        return BackendError(reason, self._redact(f"RunPod answered {status} to {method} {path}: {words}"),
                            status=status)

    def _redact(self, text: str) -> str:
        return redact(text, extra_secrets=[self._api_key])

    def _pod(self, response: httpx.Response) -> ProviderPod:
        data = _json(response)
        if not isinstance(data, dict) or not data.get("id"):
            raise BackendError("provider_error", "RunPod answered without a pod id", status=response.status_code)
        return _pod_from(data)


# --- parsing --------------------------------------------------------------------------

def _log_event(data: str) -> LogLine | None:
    """One SSE event's `data` as a log line (None for an event without a usable line)."""
    if not data:
        return None
    try:
        payload = json_lib.loads(data)
    except ValueError:
        return LogLine(data)
    if not isinstance(payload, dict) or not isinstance(payload.get("line"), str):
        return None
    return LogLine(payload["line"], ts=payload.get("ts") if isinstance(payload.get("ts"), str) else None,
                   source=str(payload.get("source") or "container"))


def _quote(pod_id: str) -> str:
    return urllib.parse.quote(str(pod_id), safe="")


def _json(response: httpx.Response):
    try:
        return response.json()
    except ValueError:
        raise BackendError("provider_error", f"RunPod answered {response.status_code} with a body that is "
                                             f"not JSON", status=response.status_code) from None


def _problem(response: httpx.Response) -> tuple[str, str]:
    """(title, detail) of an application/problem+json body; errors[] are folded into detail."""
    try:
        data = response.json()
    except ValueError:
        return "", response.text[:300].strip()
    if not isinstance(data, dict):
        return "", str(data)[:300]
    title = str(data.get("title") or data.get("error") or "")
    detail = str(data.get("detail") or data.get("message") or "")
    errors = data.get("errors")
    if isinstance(errors, list) and errors:
        parts = []
        for item in errors[:5]:
            if isinstance(item, dict):
                where = item.get("field") or item.get("pointer") or item.get("path") or ""
                text = item.get("detail") or item.get("message") or ""
                parts.append(f"{where}: {text}" if where else str(text))
            else:
                parts.append(str(item))
        detail = "; ".join(p for p in [detail, *parts] if p)
    return title[:300], detail[:1000]


def _is_capacity(response: httpx.Response) -> bool:
    """A capacity answer, by its wording or by its problem class, whatever the status. RunPod's
    v2 answers capacity as a 400 whose only sign is the `detail`; a class is read too in case
    one is added (its ErrorResponse has none today)."""
    if response.status_code < 400 or response.status_code in (401, 402, 403, 429):
        return False
    title, detail = _problem(response)
    return bool(_CAPACITY.search(f"{title} {detail}")) or bool(_CAPACITY_CLASS.search(_problem_class(response)))


def _problem_class(response: httpx.Response) -> str:
    """The problem's `type` URI (unless about:blank), `code` or `errorClass`, as one string."""
    try:
        data = response.json()
    except ValueError:
        return ""
    if not isinstance(data, dict):
        return ""
    kind = str(data.get("type") or "")
    return " ".join(str(v) for v in (kind if kind != "about:blank" else "", data.get("code") or "",
                                     data.get("errorClass") or "") if v)


def _retry_after(response: httpx.Response) -> float | None:
    raw = response.headers.get("Retry-After")
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        return max(moment.timestamp() - time.time(), 0.0)


def _ratelimit_reset(response: httpx.Response) -> float | None:
    """Seconds until reset from `RateLimit: limit=…, remaining=…, reset=N` (or `…;t=N`)."""
    raw = response.headers.get("RateLimit")
    match = _RESET.search(raw or "")
    return float(match.group(1)) if match else None


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _ssh_endpoint(ssh) -> tuple[str | None, int | None, str | None]:
    """(host, port, user) from v2's `ssh: {"proxy": {...}, "direct": {...}}` (each null or
    `{host, port, username, command}`): the direct connection (public IP, full SSH) when
    there is one, else RunPod's proxy; the flat `{host, port}` of older answers is still read."""
    if not isinstance(ssh, dict):
        return None, None, None
    for way in ("direct", "proxy"):
        endpoint = ssh.get(way)
        if isinstance(endpoint, dict) and endpoint.get("host"):
            user = endpoint.get("username")
            return str(endpoint["host"]), _int(endpoint.get("port")), str(user) if user else None
    return (str(ssh["host"]), _int(ssh.get("port")), None) if ssh.get("host") else (None, None, None)


def _keys(response: httpx.Response) -> list[str]:
    data = _json(response)
    keys = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(keys, list):
        raise BackendError("provider_error", "RunPod answered the SSH keys without a key list",
                           status=response.status_code)
    return [str(key) for key in keys]


def _pod_from(data: dict) -> ProviderPod:
    gpu = data.get("gpu") if isinstance(data.get("gpu"), dict) else {}
    runtime = data.get("runtime") if isinstance(data.get("runtime"), dict) else {}
    ssh_host, ssh_port, ssh_user = _ssh_endpoint(data.get("ssh"))
    if not ssh_host:
        for port in runtime.get("ports") or []:
            if isinstance(port, dict) and _int(port.get("private")) == 22 and port.get("ip"):
                ssh_host, ssh_port, ssh_user = port["ip"], _int(port.get("public")), "root"
                break
    try:
        cost = float(data.get("cost") or 0.0)
    except (TypeError, ValueError):
        cost = 0.0
    return ProviderPod(
        id=str(data["id"]), name=str(data.get("name") or ""),
        status=str(data.get("status") or "PROVISIONING").upper(),
        cost_per_hr=cost, uptime_seconds=_int(runtime.get("uptime")) or 0,
        gpu_id=gpu.get("id"), gpu_count=_int(gpu.get("count")) or 0,
        data_center_id=data.get("dataCenterId"), ssh_host=ssh_host, ssh_port=ssh_port, ssh_user=ssh_user,
    )


@lru_cache(maxsize=16)
def _cached_backend(pid: int, account: str, api_key: str, url: str, team_id: str | None, team_header: str,
                    user_agent: str, timeout: float, max_retries: int) -> RunPodBackend:
    """One RunPod backend per process and configuration, so its HTTP client (and its kept-alive
    connections) serves every watcher pass and dispatch instead of a new client per call that
    is never closed. Keyed by the process id: a forked job never shares its parent's sockets."""
    return RunPodBackend(account, api_key, url, team_id=team_id, team_header=team_header, user_agent=user_agent,
                         timeout=timeout, max_retries=max_retries)


@registers_backend("runpod")
def build(account: PodAccount, config) -> PodBackend:
    """A RunPod account from the settings its table entry names: its API key and, for a team
    account, the team id (sent only with that key: RunPod rejects it on personal keys)."""
    key_name = account.settings["api_key"]
    api_key = (setting(config, key_name, "") or "").strip()
    if not api_key:
        raise BackendError("provider_auth", f"No RunPod API key is configured for the {account.name} "
                                            f"account: set {key_name}.")
    team_id_name = account.settings.get("team_id")
    return _cached_backend(
        os.getpid(), account.name, api_key, setting(config, "RUNPOD_API_URL", "https://api.runpod.io"),
        (setting(config, team_id_name, "") or None) if team_id_name else None,
        (setting(config, "RUNPOD_TEAM_HEADER", "") or "").strip(),
        setting(config, "RUNPOD_USER_AGENT", "") or "",
        float(setting(config, "RUNPOD_TIMEOUT_SECONDS", 30) or 30),
        int(setting(config, "RUNPOD_MAX_RETRIES", 3) or 0),
    )
