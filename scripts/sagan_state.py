#!/usr/bin/env python3
"""sagan_state.py — Sagan's command-line client (stdlib only, runs anywhere with python3).

Agents, pods and scripts use it to read and move experiments:

    sagan_state.py list --status running
    sagan_state.py view 192
    sagan_state.py status 365 implementing --note "Orchestrator queued"
    sagan_state.py marker 192 epm:code-review --review-pair code_review --round 1 \\
        --reviewer code-reviewer --verdict needs_targeted_fix --required-fix "pool p-values"
    sagan_state.py events 192 --marker epm:code-review
    sagan_state.py runs --experiment 192 --status running
    sagan_state.py runs show 3f2a9c1e-… --after 40
    sagan_state.py clean-result 192 --file result.html --title "… (MODERATE confidence)"
    sagan_state.py promote 192 --to shared
    sagan_state.py artifacts 192
    sagan_state.py upload-artifact results/metrics.json --name results/metrics.json   # on a pod

and the research record (projects, beliefs, the literature library, typed links):

    sagan_state.py projects                      # list; `projects show SLUG`, `projects create --title …`
    sagan_state.py beliefs --project probing     # list; `beliefs show B3`, `beliefs create --title …`
    sagan_state.py literature search "sparse probes" --read-state unread
    sagan_state.py literature add arXiv:2401.01234 --project probing
    sagan_state.py literature show 3f2a9c1e-…
    sagan_state.py link "#12" tests B3 --note "the probe sweep tests it"

and ideation (SPEC §12.4):

    sagan_state.py ideas                         # list; `ideas show I3`
    sagan_state.py ideas start clean_result R12  # or belief B3, literature <uuid>, project SLUG
    sagan_state.py ideas answer I3 4 "Two more seeds at 1B."
    sagan_state.py ideas card I3 --title "Ablate the data order" --body-file idea.md
    sagan_state.py ideas promote I3 3f2a9c1e-… --to experiment

Configuration: --base-url (default $SAGAN_BASE_URL), --token (default $SAGAN_API_TOKEN).
Exit codes: 0 ok, 1 the server refused (its message is printed), 2 cannot reach the server
or bad usage.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

DEFAULT_BASE_URL = "http://127.0.0.1:5000"

# Built-in fallbacks; the live lists come from the server's registries when reachable.
FALLBACK_STATUSES = [
    "proposed", "clarifying", "awaiting_clarifications", "gate_pending", "planning",
    "plan_pending", "awaiting_approval", "approved", "queued", "implementing", "code_reviewing",
    "testing", "running", "uploading", "verifying", "interpreting", "clean_result_drafting",
    "followups_running", "reviewing", "awaiting_promotion", "blocked", "shared", "completed",
    "done_experiment", "done_impl", "failed", "cancelled", "archived",
]
REVIEW_PAIRS = ["code_review", "interpretation", "clean_result"]
VERDICTS = ["pass", "needs_targeted_fix", "blocked_needs_user_decision", "fail_not_worth_continuing"]
EVENT_TYPES = ["state_changed", "approval_requested", "approval_resolved", "marker", "progress",
               "note", "blocked", "comment"]


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, body: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.body = status, code, message, body or {}


class Unreachable(Exception):
    pass


class Client:
    def __init__(self, base_url: str, token: str | None, timeout: float):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(self, method: str, path: str, body: dict | None = None, query: dict | None = None):
        url = self.base_url + path
        if query:
            query = {k: v for k, v in query.items() if v not in (None, "")}
            if query:
                url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        return self.send(req, self.token)

    def send(self, req: urllib.request.Request, token: str | None):
        """Send `req` with `token`; its JSON answer, or ApiError with the server's message."""
        req.add_header("Accept", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
                return json.loads(raw) if raw else {}
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = {"error": "http_error", "message": raw.decode(errors="replace")[:300] or err.reason}
            raise ApiError(err.code, payload.get("error", "error"), payload.get("message", str(err.reason)), payload)
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise Unreachable(f"cannot reach Sagan at {self.base_url}: {reason}; set SAGAN_BASE_URL")


def registry_choices(client: Client) -> list[str]:
    """Statuses from the server, or the built-in list when it cannot be asked."""
    try:
        return [s["name"] for s in client.request("GET", "/api/statuses")["statuses"]]
    except (ApiError, Unreachable, KeyError, TypeError):
        return FALLBACK_STATUSES


def emit(data) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def summary_of(view: dict) -> str:
    e = view["experiment"]
    lines = [f"#{e['number']} {e['title']}",
             f"  status: {e['status']}  ·  {e['turn']}",
             f"  kind: {e['kind']}  priority: {e['priority']}  tags: {', '.join(e.get('tags') or []) or '—'}"]
    if e.get("statusBeforeBlock"):
        lines.append(f"  blocked from: {e['statusBeforeBlock']}")
    events = view.get("events") or []
    if events:
        lines.append("  recent events:")
        for ev in events[:10]:
            label = ev.get("marker") or ev["eventType"]
            move = f" {ev['fromStatus']} → {ev['toStatus']}" if ev["eventType"] == "state_changed" else ""
            note = f" — {ev['note']}" if ev.get("note") else ""
            lines.append(f"    {ev['createdAt'][:19]} {label}{move}{note}"[:160])
    pending = [a for a in view.get("approvalRequests") or [] if a["status"] == "pending"]
    if pending:
        lines.append(f"  pending approval: {pending[0]['title']}")
    return "\n".join(lines)


# --- commands ---------------------------------------------------------------------

def cmd_list(client: Client, args) -> int:
    data = client.request("GET", "/api/experiments", query={"status": args.status, "limit": args.limit})
    if args.json or not sys.stdout.isatty():
        emit(data)
    else:
        for e in data["experiments"]:
            print(f"#{e['number']:<6} {e['status']:<24} {e['title'][:80]}")
    return 0


def cmd_view(client: Client, args) -> int:
    data = client.request("GET", f"/api/experiments/{args.experiment}", query={"events": args.events})
    as_json = args.json or (not args.summary and not sys.stdout.isatty())
    if as_json:
        emit(data)
    else:
        print(summary_of(data))
    return 0


def cmd_status(client: Client, args) -> int:
    body = {"status": args.status}
    if args.note:
        body["note"] = args.note
    data = client.request("PATCH", f"/api/experiments/{args.experiment}", body)
    e = data["experiment"]
    print(f"#{e['number']} is now {e['status']} ({e['turn']})")
    return 0


def cmd_patch(client: Client, args) -> int:
    body: dict = {}
    if args.json_body:
        try:
            body = json.loads(args.json_body)
        except ValueError as exc:
            print(f"--json-body is not valid JSON: {exc}", file=sys.stderr)
            return 2
    for name in ("title", "hypothesis", "priority", "kind", "compute_size", "git_branch", "git_commit"):
        value = getattr(args, name)
        if value is not None:
            body[name] = value
    if args.tags is not None:
        body["tags"] = [t.strip() for t in args.tags.split(",") if t.strip()]
    if not body:
        print("Nothing to patch: give at least one field (see --help).", file=sys.stderr)
        return 2
    data = client.request("PATCH", f"/api/experiments/{args.experiment}", body)
    e = data["experiment"]
    print(f"#{e['number']} updated ({e['status']})")
    return 0


def cmd_marker(client: Client, args) -> int:
    body: dict = {"marker": args.marker, "event_type": args.event_type or "marker"}
    if args.metadata_json:
        try:
            body["metadata"] = json.loads(args.metadata_json)
        except ValueError as exc:
            print(f"--metadata-json is not valid JSON: {exc}", file=sys.stderr)
            return 2
    if body["event_type"] != "marker":
        body["to_status"] = args.to_status
        body["from_status"] = args.from_status
    for name in ("note", "actor_kind", "review_pair", "round", "reviewer", "verdict",
                 "required_fix", "reconciler_decision", "next_status"):
        value = getattr(args, name)
        if value is not None:
            body[name] = value
    data = client.request("POST", f"/api/experiments/{args.experiment}/workflow-events", body)
    if data.get("id"):
        print(f"{args.marker} recorded on #{args.experiment} (event {data['id']})")
    else:
        print(f"#{args.experiment} is now {data.get('status')}")
    return 0


def cmd_events(client: Client, args) -> int:
    data = client.request("GET", f"/api/experiments/{args.experiment}/events",
                          query={"event_type": args.type, "marker": args.marker, "since": args.since,
                                 "limit": args.limit, "before": args.before})
    if args.json or not sys.stdout.isatty():
        emit(data)
    else:
        for ev in data["events"]:
            label = ev.get("marker") or ev["eventType"]
            move = f" {ev['fromStatus']} → {ev['toStatus']}" if ev["eventType"] == "state_changed" else ""
            print(f"{ev['createdAt'][:19]} {label}{move} {ev.get('note') or ''}".rstrip())
        if data.get("nextCursor"):
            print(f"(more: --before '{data['nextCursor']}')")
    return 0


RUN_STATUSES = ["queued", "running", "waiting", "awaiting_approval", "completed", "failed", "cancelled",
                "blocked"]


def _one_line(text, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[:width - 1] + "…"


def run_line(r: dict) -> str:
    tokens = (r.get("inputTokens") or 0) + (r.get("outputTokens") or 0)
    return (f"{r['id'][:8]}  {r['kind']:<10} {r['status']:<17} {r['agent'][:28]:<28} "
            f"{(r.get('createdAt') or '')[:16]:<16}  {tokens:>9,} tok  ${r.get('costUsd') or 0:,.2f}")


def cmd_runs(client: Client, args) -> int:
    if args.runs_command == "show":
        return cmd_run_show(client, args)
    if args.runs_command == "cancel":
        return cmd_run_cancel(client, args)
    data = client.request("GET", "/api/runs", query={"experiment": args.experiment, "status": args.status,
                                                     "classification": args.classification, "limit": args.limit})
    if args.json or not sys.stdout.isatty():
        emit(data)
    else:
        for r in data["runs"]:
            print(run_line(r))
        if not data["runs"]:
            print("no runs")
    return 0


def cmd_run_show(client: Client, args) -> int:
    data = client.request("GET", f"/api/runs/{args.run_id}", query={"after": args.after, "limit": args.limit})
    if args.json or not sys.stdout.isatty():
        emit(data)
        return 0
    r = data["run"]
    print(f"Run {r['id'][:8]}  {r['kind']}  {r['agent']}  {r['status']}")
    print(f"  id: {r['id']}  events: {r['lastSeq']}  tokens: {r.get('inputTokens') or 0:,} in / "
          f"{r.get('outputTokens') or 0:,} out  cost: ${r.get('costUsd') or 0:,.2f}")
    for label, key in (("parent", "parentRunId"), ("resumes", "resumesRunId")):
        if r.get(key):
            print(f"  {label}: {r[key]}")
    if r.get("failureReason") or r.get("lastError"):
        print(f"  failure: {r.get('failureReason') or ''} {_one_line(r.get('lastError'), 200)}".rstrip())
    for ev in data["events"]:
        print(f"  {ev['seq']:>5} {ev['createdAt'][:19]} {ev['eventType']}: {_one_line(ev.get('body'), 140)}")
    if data.get("nextAfter"):
        print(f"(more: runs show {r['id']} --after {data['nextAfter']})")
    return 0


def cmd_run_cancel(client: Client, args) -> int:
    data = client.request("POST", f"/api/runs/{args.run_id}/cancel", {})
    print(data.get("message") or f"Run {args.run_id} cancel requested")
    return 0


def cmd_launch_pod(client: Client, args) -> int:
    data = client.request("POST", f"/api/experiments/{args.experiment}/launch-pods", {})
    print(f"dispatch {data['run']['id'][:8]} queued for #{args.experiment}")
    return 0


def cmd_pods(client: Client, args) -> int:
    data = client.request("GET", f"/api/experiments/{args.experiment}/pods")
    if args.json or not sys.stdout.isatty():
        emit(data)
        return 0
    for pod in data["pods"]:
        pct = "—" if pod["progressPct"] is None else f"{pod['progressPct']:g}%"
        print(f"{pod['name']:<40} {pod['status']:<12} {pct:>5}  ${pod['spendUsd']:.2f}  {pod['progressMessage'] or ''}"[:160])
    print(f"total spend ${data['spendUsd']:.2f}")
    return 0


def _size(count: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:,} {unit}" if unit == "bytes" else f"{count:,.1f} {unit}"
        count /= 1024
    return ""


def cmd_artifacts(client: Client, args) -> int:
    data = client.request("GET", f"/api/experiments/{args.experiment}/artifacts")
    if args.json or not sys.stdout.isatty():
        emit(data)
        return 0
    for item in data["artifacts"]:
        state = "" if item.get("status") == "ready" else f"  [{item.get('status')}]"
        print(f"{item['name']:<50} {_size(item['size']):>12}{state}"[:160])
        if item.get("note"):
            print(f"    {item['note']}")
    usage = data.get("usage") or {}
    if usage:
        print(f"{usage['files']:,} of {usage['maxFiles']:,} files · {_size(usage['bytes'])} of "
              f"{_size(usage['maxBytes'])} (this experiment's artifact budget)")
    return 0


def cmd_upload_artifact(client: Client, args) -> int:
    """A pod's upload, with its own token: what a training script sends mid-run."""
    url = args.url or os.environ.get("SAGAN_ARTIFACT_URL") or client.base_url + "/api/artifacts"
    token = args.pod_token or os.environ.get("SAGAN_POD_PROGRESS_TOKEN")
    if not token:
        print("upload-artifact needs the pod's token: --pod-token or $SAGAN_POD_PROGRESS_TOKEN", file=sys.stderr)
        return 2
    name = args.name or os.path.basename(args.file)
    try:
        with open(args.file, "rb") as handle:
            body = handle.read()
    except OSError as exc:
        print(f"cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    req = urllib.request.Request(url, data=body, method="POST")
    req.add_header("Content-Type", "application/octet-stream")
    # Printable ASCII goes as is; anything else (and "%") percent-encoded, as the bootstrap does.
    req.add_header("X-Sagan-Artifact-Name", urllib.parse.quote(name, safe="".join(
        chr(c) for c in range(0x20, 0x7f) if chr(c) != "%")))
    data = client.send(req, token)
    note = " (being processed)" if data.get("status") == "processing" else ""
    print(f"stored {data['name']}: {data['size']:,} bytes{note}")
    return 0


def cmd_promote(client: Client, args) -> int:
    body: dict = {"to": args.to}
    if args.note:
        body["note"] = args.note
    if args.confirm_lint:
        body["confirm_lint"] = True
    try:
        data = client.request("POST", f"/api/experiments/{args.experiment}/promote", body)
    except ApiError as exc:
        if exc.code == "lint_failed":
            print(f"error {exc.status} lint_failed: {exc.message}", file=sys.stderr)
            for finding in exc.body.get("findings") or []:
                if not finding.get("ok"):
                    print(f"  ✗ {finding.get('message')}", file=sys.stderr)
            print("Fix the result, or pass --confirm-lint to promote anyway.", file=sys.stderr)
            return 1
        raise
    e = data["experiment"]
    print(f"#{e['number']} promoted: now {e['status']}")
    return 0


def cmd_clean_result(client: Client, args) -> int:
    body: dict = {}
    if args.file:
        try:
            body["html"] = sys.stdin.read() if args.file == "-" else open(args.file, encoding="utf-8").read()
        except OSError as exc:
            print(f"cannot read {args.file}: {exc.strerror}", file=sys.stderr)
            return 2
    if args.title is not None:
        body["title"] = args.title
    if not body:
        print("Nothing to send: give --file PATH (or - for stdin) and/or --title.", file=sys.stderr)
        return 2
    data = client.request("PATCH", f"/api/clean-results/{args.experiment}", body)
    lint = data.get("lint") or {}
    problems = [f for f in lint.get("findings") or [] if not f.get("ok")]
    state = f"version {data['version']}" if data.get("changed") else f"unchanged (version {data['version']})"
    print(f"#{data['experiment']['number']} clean result {state}; lint "
          + ("passed" if not problems else f"found {len(problems)} problem(s)"))
    for finding in problems:
        print(f"  ✗ {finding.get('message')}")
    return 0


# --- the research record ------------------------------------------------------------

def _as_json(args) -> bool:
    """JSON when asked, or when the output is not a terminal (agents parse it), unless --summary."""
    if getattr(args, "summary", False):
        return False
    return bool(getattr(args, "json", False)) or not sys.stdout.isatty()


def _output_options(parser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--json", action="store_true", help="always print JSON")
    mode.add_argument("--summary", action="store_true", help="always print the summary")


def _text_arg(args, name: str, file_name: str):
    """A text option given inline (--summary TEXT) or from a file (--summary-file PATH, - for stdin)."""
    path = getattr(args, file_name, None)
    if path is None:
        return getattr(args, name, None)
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _fields(args, names: dict) -> dict:
    """{apiField: value} for each option given (None means not given)."""
    return {field: getattr(args, attr) for attr, field in names.items() if getattr(args, attr, None) is not None}


def project_line(p: dict) -> str:
    counts = f"{p.get('experimentCount', 0)} exp · {p.get('beliefCount', 0)} beliefs" if "beliefCount" in p else ""
    return f"{p['slug'][:32]:<32} {p['status']:<10} {p['title'][:70]:<70} {counts}".rstrip()


def cmd_projects(client: Client, args) -> int:
    if args.projects_command == "show":
        data = client.request("GET", f"/api/projects/{urllib.parse.quote(args.slug, safe='')}")
        if _as_json(args):
            emit(data)
            return 0
        p = data["project"]
        print(project_line(p))
        for label, key in (("question", "question"), ("summary", "summaryMd")):
            if p.get(key):
                print(f"  {label}: {_one_line(p[key], 300)}")
        narrative = data.get("publishedNarrative")
        print(f"  published narrative: v{narrative['version']}" if narrative else "  no published narrative")
        return 0
    if args.projects_command == "create":
        try:
            summary = _text_arg(args, "summary", "summary_file")
        except OSError as exc:
            print(f"cannot read {args.summary_file}: {exc.strerror}", file=sys.stderr)
            return 2
        body = _fields(args, {"title": "title", "slug": "slug", "question": "question", "status": "status"})
        if summary is not None:
            body["summaryMd"] = summary
        data = client.request("POST", "/api/projects", body)
        p = data["project"]
        print(f"project {p['slug']} created: {p['title']}")
        return 0
    data = client.request("GET", "/api/projects", query={"status": args.status})
    if _as_json(args):
        emit(data)
    else:
        for p in data["projects"]:
            print(project_line(p))
        if not data["projects"]:
            print("no projects")
    return 0


BELIEF_TEXT_OPTIONS = {"belief": "currentBelief", "evidence": "evidence", "counterevidence": "counterevidence",
                       "next_test": "nextTest"}


def belief_line(b: dict) -> str:
    return f"{b['cite']:<7} {b['status']:<12} {b['confidence']:<9} {b['title'][:90]}"


def cmd_beliefs(client: Client, args) -> int:
    if args.beliefs_command == "show":
        data = client.request("GET", f"/api/beliefs/{urllib.parse.quote(args.ref, safe='')}")
        if _as_json(args):
            emit(data)
            return 0
        b = data["belief"]
        print(belief_line(b))
        for label, key in (("believed", "currentBelief"), ("evidence", "evidence"),
                           ("counterevidence", "counterevidence"), ("next test", "nextTest")):
            if b.get(key):
                print(f"  {label}: {_one_line(b[key], 300)}")
        print(f"  version {b['version']} · {len(data.get('versions') or [])} in its history · "
              f"{len(data.get('pendingProposals') or [])} proposed update(s) waiting")
        for side in ("outgoing", "incoming"):
            for link in (data.get("links") or {}).get(side) or []:
                other = (f"{link['targetKind']} {link['targetId']}" if side == "outgoing"
                         else f"{link['sourceKind']} {link['sourceId']}")
                print(f"  {'→' if side == 'outgoing' else '←'} {link['kind']} {other}")
        return 0
    if args.beliefs_command == "create":
        body = _fields(args, {"title": "title", "status": "status", "confidence": "confidence",
                              "project": "project", **BELIEF_TEXT_OPTIONS})
        data = client.request("POST", "/api/beliefs", body)
        b = data["belief"]
        print(f"{b['cite']} created: {b['title']}")
        return 0
    data = client.request("GET", "/api/beliefs", query={"project": args.project, "status": args.status,
                                                        "q": args.query, "limit": args.limit})
    if _as_json(args):
        emit(data)
    else:
        for b in data["beliefs"]:
            print(belief_line(b))
        if not data["beliefs"]:
            print("no beliefs")
    return 0


LITERATURE_FIELD_OPTIONS = {"title": "title", "year": "year", "venue": "venue", "url": "url", "doi": "doi",
                            "arxiv_id": "arxivId", "type": "type", "abstract": "abstract", "notes": "notes"}


def item_line(item: dict) -> str:
    first = (item.get("authors") or ["?"])[0]
    ident = f"doi:{item['doi']}" if item.get("doi") else f"arXiv:{item['arxivId']}" if item.get("arxivId") else ""
    return (f"{item['id'][:8]}  {item['readState']:<8} {item['year'] or 'n.d.'!s:<5} {first[:24]:<24} "
            f"{item['title'][:70]}  {ident}").rstrip()


def cmd_literature(client: Client, args) -> int:
    if args.literature_command == "show":
        data = client.request("GET", f"/api/literature/{urllib.parse.quote(args.item_id, safe='')}")
        if _as_json(args):
            emit(data)
            return 0
        item = data["item"]
        print(item_line(item))
        print(f"  id: {item['id']}  type: {item['type']}  authors: {', '.join(item['authors'][:8]) or '—'}")
        for label, key in (("venue", "venue"), ("url", "url"), ("abstract", "abstract"), ("summary", "summaryMd"),
                           ("why it matters", "relevanceReasonMd"), ("might undercut", "threatReasonMd"),
                           ("notes", "notes")):
            if item.get(key):
                print(f"  {label}: {_one_line(item[key], 400)}")
        return 0
    if args.literature_command == "add":
        if args.identifier:
            given = [f"--{name.replace('_', '-')}" for name in [*LITERATURE_FIELD_OPTIONS, "authors", "tags"]
                     if getattr(args, name, None) is not None]
            if given:
                print(f"Give an identifier or the item's fields, not both ({', '.join(given)}).", file=sys.stderr)
                return 2
            body = {"identifier": args.identifier}
        else:
            if args.title is None:
                print("Give an identifier (arXiv id, DOI or URL) or at least --title.", file=sys.stderr)
                return 2
            body = _fields(args, LITERATURE_FIELD_OPTIONS)
            if args.authors is not None:
                body["authors"] = [a.strip() for a in args.authors.split(";") if a.strip()]
            if args.tags is not None:
                body["tags"] = [t.strip() for t in args.tags.split(",") if t.strip()]
        if args.project is not None:
            body["projectId"] = args.project
        data = client.request("POST", "/api/literature", body)
        item = data["item"]
        print(f"{'added' if data.get('created') else 'already in the library (merged)'}: {item['title']} "
              f"({item['id']})")
        return 0
    data = client.request("GET", "/api/literature", query={"q": args.text, "type": args.type,
                                                           "readState": args.read_state, "project": args.project,
                                                           "limit": args.limit})
    if _as_json(args):
        emit(data)
    else:
        for item in data["items"]:
            print(item_line(item))
        if not data["items"]:
            print("nothing in the library matches")
    return 0


def cmd_link(client: Client, args) -> int:
    body = {"source": args.source, "kind": args.kind, "target": args.target}
    if args.note is not None:
        body["note"] = args.note
    data = client.request("POST", "/api/links", body)
    link = data["link"]
    print(f"linked: {args.source} {link['kind']} {args.target} ({link['id']})")
    return 0


def idea_session_line(s: dict) -> str:
    return (f"{s['cite']:<6} {s['sourceKind']:<12} {s['answered']}/7 answered  {s['openCards']:>2} open "
            f"{s['promotedCards']:>2} promoted  {s['title'][:70]}")


def _session_path(ref: str) -> str:
    return f"/api/ideas/{urllib.parse.quote(ref, safe='')}"


def cmd_ideas(client: Client, args) -> int:
    command = args.ideas_command
    if command == "show":
        data = client.request("GET", _session_path(args.ref))
        if _as_json(args):
            emit(data)
            return 0
        s = data["session"]
        print(idea_session_line(s))
        if s.get("source"):
            print(f"  from: {s['source']['label']}")
        for q in s["questions"]:
            print(f"  {q['position']}. {q['question']}")
            if q["answer"]:
                print(f"     → {_one_line(q['answer'], 300)}")
        for card in s["cards"]:
            became = f" → {card['promotedLabel']}" if card.get("promotedLabel") else ""
            print(f"  [{card['status']}] {card['id'][:8]} ({card['origin']}) {card['title'][:90]}{became}")
        return 0
    if command == "start":
        data = client.request("POST", "/api/ideas", {"sourceKind": args.kind, "sourceId": args.source})
        s = data["session"]
        print(f"{s['cite']} started on {s['sourceKind'].replace('_', ' ')} “{s['title']}”")
        return 0
    if command == "answer":
        try:
            text = sys.stdin.read() if args.text == "-" else args.text
        except OSError as exc:
            print(f"cannot read standard input: {exc.strerror}", file=sys.stderr)
            return 2
        data = client.request("POST", _session_path(args.ref) + "/answers", {"answers": {args.position: text}})
        print(f"{data['session']['cite']}: answer {args.position} " + ("saved" if data["changed"] else "unchanged"))
        return 0
    if command == "card":
        try:
            body = _text_arg(args, "body", "body_file")
        except OSError as exc:
            print(f"cannot read {args.body_file}: {exc.strerror}", file=sys.stderr)
            return 2
        payload = {"title": args.title} | ({"bodyMd": body} if body is not None else {})
        card = client.request("POST", _session_path(args.ref) + "/cards", payload)["card"]
        print(f"card {card['id']} added: {card['title']}")
        return 0
    if command == "promote":
        payload = {"target": args.to} | ({"targetRef": args.target_ref} if args.target_ref else {})
        data = client.request("POST", f"{_session_path(args.ref)}/cards/{urllib.parse.quote(args.card_id, safe='')}"
                                      "/promote", payload)
        print(f"{data['message']} ({data['card']['promotedUrl']})")
        return 0
    data = client.request("GET", "/api/ideas", query={"limit": args.limit})
    if _as_json(args):
        emit(data)
    else:
        for s in data["sessions"]:
            print(idea_session_line(s))
        if not data["sessions"]:
            print("no ideation sessions")
    return 0


def build_parser(statuses: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sagan_state.py", description="Sagan command-line client.")
    parser.add_argument("--base-url", default=os.environ.get("SAGAN_BASE_URL", DEFAULT_BASE_URL),
                        help="Sagan's URL (default: $SAGAN_BASE_URL or %(default)s)")
    parser.add_argument("--token", default=os.environ.get("SAGAN_API_TOKEN"),
                        help="API token (default: $SAGAN_API_TOKEN)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list experiments")
    p.add_argument("--status", choices=statuses)
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("view", help="show one experiment (JSON when piped)")
    p.add_argument("experiment", help="number or uuid")
    p.add_argument("--events", type=int, default=50, help="how many recent events")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--json", action="store_true", help="always print JSON")
    mode.add_argument("--summary", action="store_true", help="always print the summary")
    p.set_defaults(func=cmd_view)

    p = sub.add_parser("status", help="move an experiment to a status")
    p.add_argument("experiment")
    p.add_argument("status", metavar="STATUS", help="one of: " + ", ".join(statuses))
    p.add_argument("--note")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("patch", help="change fields of an experiment")
    p.add_argument("experiment")
    for name in ("title", "hypothesis", "priority", "kind", "compute-size", "git-branch", "git-commit"):
        p.add_argument(f"--{name}", dest=name.replace("-", "_"))
    p.add_argument("--tags", help="comma-separated")
    p.add_argument("--json-body", help="raw JSON object to send")
    p.set_defaults(func=cmd_patch)

    for name in ("marker", "markers"):
        p = sub.add_parser(name, help="post a workflow marker" if name == "marker" else "alias of marker")
        p.add_argument("experiment")
        p.add_argument("marker", metavar="MARKER", help="e.g. epm:code-review (see GET /api/markers)")
        p.add_argument("--event-type", choices=["marker", "state_changed"])
        p.add_argument("--from-status", choices=statuses)
        p.add_argument("--to-status", choices=statuses)
        p.add_argument("--note")
        p.add_argument("--metadata-json")
        p.add_argument("--actor-kind", help="accepted for compatibility; the server decides the actor")
        p.add_argument("--review-pair", choices=REVIEW_PAIRS)
        p.add_argument("--round", type=int, choices=[1, 2, 3])
        p.add_argument("--reviewer")
        p.add_argument("--verdict", choices=VERDICTS)
        p.add_argument("--required-fix")
        p.add_argument("--reconciler-decision")
        p.add_argument("--next-status", choices=statuses)
        p.set_defaults(func=cmd_marker)

    p = sub.add_parser("events", help="list an experiment's events (filterable)")
    p.add_argument("experiment")
    p.add_argument("--type", choices=EVENT_TYPES)
    p.add_argument("--marker")
    p.add_argument("--since", help="ISO time, e.g. 2026-05-14T09:00:00Z")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--before", help="cursor from a previous page")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_events)

    p = sub.add_parser("launch-pod", help="dispatch the approved pod spec (needs a dispatch-scoped token)")
    p.add_argument("experiment")
    p.set_defaults(func=cmd_launch_pod)

    p = sub.add_parser("pods", help="an experiment's pods with status, progress and spend")
    p.add_argument("experiment")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_pods)

    p = sub.add_parser("artifacts", help="an experiment's artifacts, their state and its artifact budget")
    p.add_argument("experiment")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_artifacts)

    p = sub.add_parser("upload-artifact", help="upload a file as the pod (its token; on a pod, mid-run)")
    p.add_argument("file", help="the file to upload")
    p.add_argument("--name", help="its artifact name, a relative path (default: the file's name)")
    p.add_argument("--pod-token", help="the pod's token (default: $SAGAN_POD_PROGRESS_TOKEN)")
    p.add_argument("--url", help="the upload URL (default: $SAGAN_ARTIFACT_URL, else BASE_URL/api/artifacts)")
    p.set_defaults(func=cmd_upload_artifact)

    p = sub.add_parser("promote", help="promote a clean result (awaiting_promotion → shared | completed)")
    p.add_argument("experiment")
    p.add_argument("--to", choices=["shared", "completed"], default="shared")
    p.add_argument("--note")
    p.add_argument("--confirm-lint", action="store_true", help="promote even though lint fails")
    p.set_defaults(func=cmd_promote)

    p = sub.add_parser("clean-result", help="set an experiment's clean result (HTML, sanitized and versioned)")
    p.add_argument("experiment")
    p.add_argument("--file", help="HTML file to send, or - for standard input")
    p.add_argument("--title", help="the finding, ending with (LOW|MODERATE|HIGH confidence)")
    p.set_defaults(func=cmd_clean_result)

    p = sub.add_parser(
        "runs", help="list agent runs; `runs show RUN_ID` for one run and its events, `runs cancel RUN_ID`",
        description="List agent runs (newest first), or act on one: "
                    "`runs show RUN_ID [--after SEQ]` prints the run and its events after SEQ; "
                    "`runs cancel RUN_ID` cancels it. Output is JSON when piped (or with --json).")
    p.add_argument("--experiment", help="only runs of this experiment (number or uuid)")
    p.add_argument("--status", metavar="STATUS", help="one of: " + ", ".join(RUN_STATUSES))
    p.add_argument("--classification", metavar="CLASS",
                   help="whether the run was worth it: pending (unclassified), useful, not_useful, archived")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--json", action="store_true", help="always print JSON")
    p.set_defaults(func=cmd_runs, runs_command=None)
    runs_sub = p.add_subparsers(dest="runs_command", metavar="{show,cancel}")
    q = runs_sub.add_parser("show", help="one run and its events (JSON when piped)")
    q.add_argument("run_id", metavar="RUN_ID", help="the run's uuid")
    q.add_argument("--after", type=int, default=0, metavar="SEQ", help="only events after this seq (default 0)")
    q.add_argument("--limit", type=int, default=500, help="at most this many events (1-1000)")
    q.add_argument("--json", action="store_true", help="always print JSON")
    q = runs_sub.add_parser("cancel", help="cancel a run (stops between steps if it is running)")
    q.add_argument("run_id", metavar="RUN_ID", help="the run's uuid")
    _research_commands(sub)
    return parser


def _research_commands(sub) -> None:
    """projects, beliefs, literature, link and ideas: the research record over /api."""
    p = sub.add_parser("projects", help="list projects; `projects show SLUG`, `projects create --title …`",
                       description="List projects (active first), or `show SLUG` / `create`. "
                                   "Output is JSON when piped (or with --json).")
    p.add_argument("--status", help="only projects in this status")
    _output_options(p)
    p.set_defaults(func=cmd_projects, projects_command=None)
    project_sub = p.add_subparsers(dest="projects_command", metavar="{show,create}")
    q = project_sub.add_parser("show", help="one project, with its published narrative's version")
    q.add_argument("slug", metavar="SLUG")
    _output_options(q)
    q = project_sub.add_parser("create", help="create a project")
    q.add_argument("--title", required=True)
    q.add_argument("--slug", help="default: made from the title")
    q.add_argument("--question", help="the research question")
    summary = q.add_mutually_exclusive_group()
    summary.add_argument("--summary", help="markdown")
    summary.add_argument("--summary-file", help="markdown file, or - for standard input")
    q.add_argument("--status")

    p = sub.add_parser("beliefs", help="list beliefs; `beliefs show B3`, `beliefs create --title …`",
                       description="List beliefs (most recently changed first), or `show REF` / `create`. "
                                   "Only the owner changes a belief; agents propose updates from their tools. "
                                   "Output is JSON when piped (or with --json).")
    p.add_argument("--project", help="a project's slug")
    p.add_argument("--status")
    p.add_argument("-q", "--query", help="words in the title or text")
    p.add_argument("--limit", type=int, default=100)
    _output_options(p)
    p.set_defaults(func=cmd_beliefs, beliefs_command=None)
    belief_sub = p.add_subparsers(dest="beliefs_command", metavar="{show,create}")
    q = belief_sub.add_parser("show", help="one belief, its history, proposals waiting and links")
    q.add_argument("ref", metavar="REF", help="B3, 3 or the belief's uuid")
    _output_options(q)
    q = belief_sub.add_parser("create", help="state a new belief")
    q.add_argument("--title", required=True)
    q.add_argument("--belief", help="what is believed (markdown)")
    q.add_argument("--evidence")
    q.add_argument("--counterevidence")
    q.add_argument("--next-test", dest="next_test")
    q.add_argument("--status", help="default draft")
    q.add_argument("--confidence", help="LOW, MODERATE or HIGH (default LOW)")
    q.add_argument("--project", help="a project's slug")

    p = sub.add_parser("literature", help="the library: `literature search|add|show`",
                       description="Search the literature library, add an item (by an arXiv id, DOI or URL, or "
                                   "by its fields), or show one. Output is JSON when piped (or with --json).")
    p.set_defaults(func=lambda client, args: _usage(p))
    literature_sub = p.add_subparsers(dest="literature_command", metavar="{search,add,show}")
    q = literature_sub.add_parser("search", help="full-text search (best match first; no words: the unread queue)")
    q.add_argument("text", nargs="?", default="", help="words in the title, authors, abstract, summary or notes")
    q.add_argument("--type")
    q.add_argument("--read-state", dest="read_state")
    q.add_argument("--project", help="a project (slug or uuid)")
    q.add_argument("--limit", type=int, default=50)
    _output_options(q)
    q.set_defaults(func=cmd_literature)
    q = literature_sub.add_parser("add", help="add an item by identifier, or by --title and other fields")
    q.add_argument("identifier", nargs="?", help="arXiv:2401.01234, doi:10.…/…, or a URL")
    for name in LITERATURE_FIELD_OPTIONS:
        q.add_argument(f"--{name.replace('_', '-')}", dest=name)
    q.add_argument("--authors", help="separated by ';' (\"Lovelace, Ada; Turing, Alan\")")
    q.add_argument("--tags", help="comma-separated")
    q.add_argument("--project", help="a project (slug or uuid)")
    q.set_defaults(func=cmd_literature)
    q = literature_sub.add_parser("show", help="one item: metadata, abstract, summary, reasons, notes")
    q.add_argument("item_id", metavar="ID", help="the item's uuid")
    _output_options(q)
    q.set_defaults(func=cmd_literature)

    p = sub.add_parser("link", help="link two records: link SOURCE KIND TARGET",
                       description="Link two records by typed reference: \"#12\" (experiment), \"R12\" (its "
                                   "clean result), \"B3\" (belief), arXiv:… or doi:… (a library item), a "
                                   "project's slug, or kind:<uuid>. KIND is the link's kind, e.g. tests, supports, "
                                   "contradicts, cites.")
    p.add_argument("source", metavar="SOURCE")
    p.add_argument("kind", metavar="KIND")
    p.add_argument("target", metavar="TARGET")
    p.add_argument("--note")
    p.set_defaults(func=cmd_link)

    p = sub.add_parser("ideas", help="ideation sessions: list; `ideas show|start|answer|card|promote`",
                       description="Ideation sessions (SPEC §12.4): list them, show one (its seven questions, "
                                   "answers and idea cards), start one from a source, answer a question, add a "
                                   "card, promote a card. Output is JSON when piped (or with --json).")
    p.add_argument("--limit", type=int, default=50)
    _output_options(p)
    p.set_defaults(func=cmd_ideas, ideas_command=None)
    ideas_sub = p.add_subparsers(dest="ideas_command", metavar="{show,start,answer,card,promote}")
    q = ideas_sub.add_parser("show", help="one session: questions, answers, cards")
    q.add_argument("ref", metavar="REF", help="I3, 3 or the session's uuid")
    _output_options(q)
    q = ideas_sub.add_parser("start", help="start a session from a source: KIND SOURCE")
    q.add_argument("kind", metavar="KIND", choices=["clean_result", "belief", "literature", "project"],
                   help="clean_result, belief, literature or project")
    q.add_argument("source", metavar="SOURCE", help="R12, B3, a project's slug, or the record's uuid")
    q = ideas_sub.add_parser("answer", help="answer one question: REF POSITION TEXT (- reads standard input)")
    q.add_argument("ref", metavar="REF")
    q.add_argument("position", metavar="POSITION", choices=[str(n) for n in range(1, 8)], help="1 to 7")
    q.add_argument("text", metavar="TEXT", help="the answer (empty clears it; - for standard input)")
    q = ideas_sub.add_parser("card", help="add your own idea card")
    q.add_argument("ref", metavar="REF")
    q.add_argument("--title", required=True)
    body = q.add_mutually_exclusive_group()
    body.add_argument("--body", help="markdown")
    body.add_argument("--body-file", help="markdown file, or - for standard input")
    q = ideas_sub.add_parser("promote", help="promote a card: REF CARD_ID --to TARGET")
    q.add_argument("ref", metavar="REF")
    q.add_argument("card_id", metavar="CARD_ID", help="the card's uuid")
    q.add_argument("--to", required=True, choices=["experiment", "belief_update", "literature_task",
                                                   "result_question"])
    q.add_argument("--target-ref", dest="target_ref", help="the belief (B3) or clean result (R12), when not the "
                                                           "session's own")


def _usage(parser) -> int:
    parser.print_usage(sys.stderr)
    print("say what to do: search, add or show", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Global options first, so the status choices can be fetched from the right server.
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--base-url", default=os.environ.get("SAGAN_BASE_URL", DEFAULT_BASE_URL))
    pre.add_argument("--token", default=os.environ.get("SAGAN_API_TOKEN"))
    pre.add_argument("--timeout", type=float, default=30.0)
    known, _ = pre.parse_known_args(argv)
    probe = Client(known.base_url, known.token, min(known.timeout, 3.0))
    needs_choices = any(a in argv for a in ("status", "marker", "markers", "list", "-h", "--help"))
    statuses = registry_choices(probe) if needs_choices else FALLBACK_STATUSES
    args = build_parser(statuses).parse_args(argv)
    client = Client(args.base_url, args.token, args.timeout)
    try:
        return args.func(client, args)
    except Unreachable as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Output piped into `head` and closed early: not an error worth a traceback.
        sys.stderr.close()
        return 0
    except ApiError as exc:
        print(f"error {exc.status} {exc.code}: {exc.message}", file=sys.stderr)
        known_markers = exc.body.get("known")
        if exc.code == "unknown_marker_type" and known_markers:
            print("known markers: " + ", ".join(known_markers), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
