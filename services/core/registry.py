"""The one registry of statuses, turns, board columns and the other closed vocabularies.

Pure data with no imports of ours, so models (database CHECK constraints), services
(validation, transitions), forms, the board and the CLI all derive from this module.
Lesson from the old system: three hand-kept status lists drifted apart.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# --- Experiment statuses (SPEC §2.1) -------------------------------------------------

TURN_CLARIFY_SCOPE = "Sagan turn: clarify scope"
TURN_CLARIFY = "Sagan turn: clarify hypothesis and information gain"
TURN_ANSWER = "Owner turn: answer Sagan questions"
TURN_GATE = "Owner turn: resolve gate"
TURN_PLAN = "Sagan turn: draft plan"
TURN_APPROVE = "Owner turn: approve, defer, or reject"
TURN_RUN = "Sagan turn: run and verify"
TURN_REVIEW = "Owner turn: review interpretation and propose follow-ups"
TURN_PROMOTE = "Owner turn: promote clean result"
TURN_UNBLOCK = "Owner turn: unblock or revise"
TURN_NONE = "No active owner action"
# With no model key nobody takes Sagan's turns: they are the owner's, said as what to do.
HAND_TURNS = {
    TURN_CLARIFY_SCOPE: "Owner turn: write the plan (agents are off)",
    TURN_CLARIFY: "Owner turn: write the plan (agents are off)",
    TURN_PLAN: "Owner turn: write the plan (agents are off)",
    TURN_RUN: "Owner turn: carry it forward by hand (agents are off)",
}


def turn_as_read(turn: str, agents_on: bool) -> str:
    """The turn as the owner should read it: Sagan's own when agents run, else what to do by hand."""
    return turn if agents_on else HAND_TURNS.get(turn, turn)


@dataclass(frozen=True)
class Status:
    name: str
    turn: str
    column: str
    terminal: bool = False

    @property
    def owner_turn(self) -> bool:
        return self.turn.startswith("Owner turn")

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")


# Board columns in display order (SPEC §2.4). Collapsed columns are shown folded.
BOARD_COLUMNS: list[tuple[str, str]] = [
    ("ideas", "Ideas"),
    ("clarifying", "Clarifying"),
    ("planning", "Planning"),
    ("awaiting_approval", "Awaiting approval"),
    ("implementing", "Implementing"),
    ("running", "Running"),
    ("analysis", "Analysis"),
    ("awaiting_promotion", "Awaiting promotion"),
    ("blocked", "Blocked"),
    ("done", "Done"),
    ("closed", "Archived / cancelled / failed"),
]
BOARD_COLUMN_KEYS = frozenset(key for key, _title in BOARD_COLUMNS)
COLLAPSED_COLUMNS = frozenset({"closed"})

_S = Status
STATUSES: list[Status] = [
    _S("proposed", TURN_CLARIFY_SCOPE, "ideas"),
    _S("clarifying", TURN_CLARIFY, "clarifying"),
    _S("awaiting_clarifications", TURN_ANSWER, "clarifying"),
    _S("gate_pending", TURN_GATE, "clarifying"),
    _S("planning", TURN_PLAN, "planning"),
    _S("plan_pending", TURN_APPROVE, "awaiting_approval"),
    _S("awaiting_approval", TURN_APPROVE, "awaiting_approval"),
    _S("approved", TURN_RUN, "implementing"),
    _S("queued", TURN_RUN, "implementing"),
    _S("implementing", TURN_RUN, "implementing"),
    _S("code_reviewing", TURN_RUN, "implementing"),
    _S("testing", TURN_RUN, "implementing"),
    _S("running", TURN_RUN, "running"),
    _S("uploading", TURN_RUN, "running"),
    _S("verifying", TURN_RUN, "running"),
    _S("interpreting", TURN_RUN, "analysis"),
    _S("clean_result_drafting", TURN_RUN, "analysis"),
    _S("followups_running", TURN_RUN, "analysis"),
    _S("reviewing", TURN_REVIEW, "analysis"),
    _S("awaiting_promotion", TURN_PROMOTE, "awaiting_promotion"),
    _S("blocked", TURN_UNBLOCK, "blocked"),
    _S("shared", TURN_NONE, "done", terminal=True),
    _S("completed", TURN_NONE, "done", terminal=True),
    _S("done_experiment", TURN_NONE, "done", terminal=True),
    _S("done_impl", TURN_NONE, "done", terminal=True),
    _S("failed", TURN_NONE, "closed", terminal=True),
    _S("cancelled", TURN_NONE, "closed", terminal=True),
    _S("archived", TURN_NONE, "closed", terminal=True),
]
del _S

STATUS_BY_NAME: dict[str, Status] = {s.name: s for s in STATUSES}
STATUS_NAMES: list[str] = [s.name for s in STATUSES]
TERMINAL_STATUSES: frozenset[str] = frozenset(s.name for s in STATUSES if s.terminal)
NON_TERMINAL_STATUSES: frozenset[str] = frozenset(STATUS_NAMES) - TERMINAL_STATUSES
OWNER_TURN_STATUSES: frozenset[str] = frozenset(s.name for s in STATUSES if s.owner_turn)


def turn_for(status: str) -> str:
    """The turn text of a status (SPEC §2.1); never stored, always derived."""
    return STATUS_BY_NAME[status].turn


def statuses_in_column(column: str) -> list[str]:
    return [s.name for s in STATUSES if s.column == column]


# --- Other experiment vocabularies (SPEC §1) ----------------------------------------

EXPERIMENT_KINDS = ["experiment", "infra", "survey"]
# Kinds whose result is a write-up, not a pod run (SPEC §2.2): approved → implementing →
# clean_result_drafting, never dispatched.
POD_FREE_KINDS = ("infra", "survey")
COMPUTE_SIZES = ["none", "small", "medium", "large"]
PRIORITIES = ["low", "normal", "high", "urgent"]
PRIORITY_RANK = {p: i for i, p in enumerate(PRIORITIES)}
ASSIGNEE_KINDS = ["agent", "human"]

# --- Events -----------------------------------------------------------------------

WORKFLOW_EVENT_TYPES = [
    "state_changed", "approval_requested", "approval_resolved", "marker",
    "progress", "note", "blocked", "comment",
]
ACTOR_KINDS = ["owner", "agent", "system", "pod", "token", "member"]

RUN_EVENT_TYPES = [
    "started", "assistant_text", "tool_call", "tool_result", "sdk_result", "completed",
    "failed", "cancelled", "waiting", "woken", "auto_approved", "orchestrator_queued",
    "recovery_queued", "deploy_started", "deploy_pod_started", "deploy_completed",
    "deploy_failed", "pod_substitution", "pod_create_refused", "pod_status", "pod_progress", "pod_exited",
    "pod_stop_requested", "pod_stopped", "pod_stop_failed", "pod_vanished",
    "artifact_uploaded", "blocked", "notice", "pod_terminated", "fleet_incident", "planning_queued",
    "preflight", "completion_audit",
]

# --- Plans and approvals (SPEC §1, §4) ---------------------------------------------

PLAN_SOURCES = ["owner", "agent", "api", "import"]
APPROVAL_KINDS = ["experiment_plan", "dispatch"]
APPROVAL_STATUSES = ["pending", "approved", "rejected", "superseded"]

# --- Agent runs (SPEC §5) ----------------------------------------------------------

RUN_KINDS = ["plan", "apply", "qa", "experiment"]
RUN_STATUSES = [
    "queued", "running", "waiting", "awaiting_approval",
    "completed", "failed", "cancelled", "blocked",
]
RUN_TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled", "blocked"})
# Runs still doing (or waiting to do) their work.
RUN_ACTIVE_STATUSES = ("queued", "running", "waiting")

# Failure reasons (SPEC §7): code → human message. Recoverability lives with recovery.
FAILURE_REASONS: dict[str, str] = {
    "provider_capacity": "The provider had no capacity for any allowed candidate.",
    "provider_auth": "The provider refused the credentials.",
    "provider_balance": "The provider account's balance is too low to deploy.",
    "provider_error": "The provider answered with an error.",
    "spec_invalid": "The pod spec is invalid.",
    "pod_vanished": "A pod disappeared from the provider.",
    "pod_exit_nonzero": "A pod exited with a non-zero code.",
    "partial_dispatch": "Not every pod of the spec came up.",
    "start_deadline": "Pods did not reach running before the start deadline.",
    "crash_loop": "A pod's container kept restarting.",
    "bootstrap_silence": "A pod sent no progress after starting.",
    "setup_failed": "A pod could not prepare the repository or its environment.",
    "artifacts_missing": "Declared artifacts were not uploaded.",
    "cost_cap": "The spend cap was reached.",
    "fleet_incident": "A fleet incident paused automatic work.",
    "worker_lost": "The worker died or stopped heartbeating mid-run.",
    "agent_error": "The agent reported an error.",
    "model_api_error": "The model API failed.",
    "max_turns": "The agent reached its turn limit.",
    "output_limit": "The model's reply kept exceeding the most it can write in one reply.",
    "model_refusal": "The model declined to continue.",
    "context_limit": "The conversation outgrew the model's context window.",
    "run_incomplete": "The agent ended without doing its job.",
    "cancelled_by_owner": "The owner cancelled the run.",
    "preflight_failed": "The dispatch failed its preflight checks; no pod was created.",
}

# --- Pods (SPEC §1, §6) ------------------------------------------------------------

POD_STATUSES = [
    "deploying", "running", "exited", "stop_requested", "stopped",
    "terminated", "retrying", "vanished", "failed",
]
POD_ACTIVE_STATUSES = frozenset({"deploying", "running", "retrying", "stop_requested"})
# Pods that are up or coming up: what a stop, a cap or a cancel has to stop.
POD_LIVE_STATUSES = ("deploying", "running", "retrying")
# Pods whose script has said its last word (exited) or that are gone. A pod's token works
# for POD_TOKEN_GRACE_SECONDS after it first reached one of these (Pod.ended_at), never after.
POD_ENDED_STATUSES = frozenset({"exited", "stopped", "terminated", "vanished", "failed"})
POD_STOP_REASONS = ["owner", "orphan", "failure", "cost_cap", "completed"]
CLOUD_TYPES = ["SECURE", "COMMUNITY"]
# An artifact is `processing` while a job redacts or sanitizes it (its content is not
# readable until then), `ready` once readable, `failed` when that job failed (never readable).
ARTIFACT_STATUSES = ["ready", "processing", "failed"]
ARTIFACT_USAGE_SCOPES = ["pod", "experiment"]

# --- Results, comments, tokens -----------------------------------------------------

FIGURE_KINDS = ["image", "html_artifact", "svg"]
COMMENT_AUTHOR_KINDS = ["owner", "agent", "member"]
API_TOKEN_SCOPES = ["read", "write", "dispatch", "promote"]

# --- Accounts (SPEC §13) -------------------------------------------------------------

# The owner is the first account; collaborators and mentors come by invitation, scoped to
# projects (services/core/permissions.py holds what each role may do).
ACCOUNT_ROLES = ["owner", "collaborator", "mentor"]
INVITABLE_ROLES = ["collaborator", "mentor"]
# --- The research record (SPEC §11) ----------------------------------------------

PROJECT_STATUSES = ["active", "paused", "completed", "archived"]
NARRATIVE_STATUSES = ["draft", "published", "archived"]
BELIEF_STATUSES = ["draft", "active", "supported", "weakened", "falsified", "retracted", "archived"]
CONFIDENCES = ["LOW", "MODERATE", "HIGH"]
# A proposed belief update waits for the owner; accepting (as proposed or edited) makes a
# version, and a newer proposal or a newer version supersedes a pending one.
BELIEF_PROPOSAL_STATUSES = ["pending", "accepted", "rejected", "superseded"]
# The records a typed link may join (records that arrive with later work are listed already
# so a link's kind never needs a migration when they land).
RECORD_KINDS = ["project", "belief", "experiment", "run", "clean_result", "todo", "literature", "narrative",
                "daily_log", "weekly_review", "ideation"]
LINK_KINDS = ["supports", "contradicts", "tests", "produces_evidence_for", "derives_from", "cites", "answers",
              "blocks", "duplicates", "method", "baseline", "background", "threat", "inspiration", "parent",
              "child", "sibling"]

# Ideation (SPEC §12.4): what a session starts from, who proposed a card, what becomes of a
# card, and what a card is promoted to (only a promoted card enters the record).
IDEATION_SOURCE_KINDS = ["clean_result", "belief", "literature", "project"]
IDEA_CARD_ORIGINS = ["claude", "owner"]
IDEA_CARD_STATUSES = ["open", "promoted", "discarded"]
IDEA_PROMOTION_TARGETS = ["experiment", "belief_update", "literature_task", "result_question"]

# The literature library (SPEC §11.3).
LITERATURE_TYPES = ["paper", "blog_post", "forum_post", "newsletter", "report", "repo", "video", "other"]
# `unread` is where every new item lands (an added paper, a feed's new entry); `queued` is the
# owner's (or the literature agent's) pick of what to read next.
LITERATURE_READ_STATES = ["unread", "queued", "reading", "read", "archived"]
LITERATURE_SOURCES = ["arxiv", "openreview", "semantic_scholar", "hn", "twitter_list", "rss", "manual", "bibtex",
                      "zotero"]
# A feed is an arXiv search query, an arXiv category (e.g. cs.LG), or any RSS/Atom URL.
LITERATURE_FEED_KINDS = ["arxiv_query", "arxiv_category", "rss"]

# --- The owner's day (SPEC §12) ---------------------------------------------------------

# A todo moves from the owner's inbox through scoping to an experiment's own stages (planning
# … awaiting_promotion mirror where its experiment is), then ends done, cancelled or archived.
TODO_STATUSES = ["inbox", "scoped", "planning", "open", "in_progress", "running", "interpreting",
                 "awaiting_promotion", "blocked", "done", "cancelled", "archived"]
# A todo that has ended: it cannot become an experiment until it is reopened.
TODO_CLOSED_STATUSES = frozenset({"done", "cancelled", "archived"})
TODO_INTENTS = ["exploratory", "hypothesis", "replication", "measurement", "engineering"]
# Whether an agent run was worth its cost (SPEC §12.3): `pending` until the weekly-review agent
# suggests or the owner sets one; reviews and the spend report split spend by it.
RUN_CLASSIFICATIONS = ["pending", "useful", "not_useful", "archived"]
# Who set a run's classification: the agent only suggests, and never over the owner's choice.
RUN_CLASSIFIERS = ["agent", "owner"]
# A weekly review's versions: each save a draft, one published at most (the one before archived).
WEEKLY_REVIEW_VERSION_STATUSES = ["draft", "published", "archived"]
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

# Email notifications (SPEC §12.5), in the order Settings lists them: an owner turn (batched),
# a clean result ready to read and promote, an experiment that failed or is blocked, a weekly
# review drafted.
NOTIFICATION_KINDS = ["owner_turn", "result_ready", "failure", "weekly_review"]
NOTIFICATION_KIND_LABELS = {"owner_turn": "Your turn (batched)", "result_ready": "Result ready",
                            "failure": "Failure or block", "weekly_review": "Weekly review drafted"}
# An email is queued until the SMTP server accepts it; failed after its last try.
NOTIFICATION_EMAIL_STATUSES = ["queued", "sent", "failed"]

SHARE_SCOPES = ["experiment", "project", "all_promoted", "weekly_review"]
# Where a promotion puts a result (SPEC §8.4): `shared` reaches share links, `completed` not.
PROMOTION_TARGETS = ["shared", "completed"]

# --- Markers and review loops (SPEC §3) ----------------------------------------------

MARKERS = [
    "epm:clarify", "epm:clarify-answers", "epm:plan", "epm:consistency",
    "epm:experiment-implementation", "epm:code-review", "epm:code-review-codex",
    "epm:code-review-reconcile", "epm:review-reconcile", "epm:reviewer-verdict",
    "epm:reviewer-verdict-codex", "epm:textbox-answers", "epm:reviewer-pass",
    "epm:reviewer-decision", "epm:reviewer-ensemble-final", "epm:test-verdict",
    "epm:preflight", "epm:launch", "epm:pod-dispatched", "epm:progress", "epm:results",
    "epm:upload-verification", "epm:interpretation", "epm:interp-critique",
    "epm:interp-critique-codex", "epm:interp-revision", "epm:clean-result",
    "epm:clean-result-critique", "epm:clean-result-critique-codex",
    "epm:clean-result-critique-reconcile", "epm:clean-result-lint", "epm:follow-ups",
    "epm:awaiting-promotion", "epm:promoted", "epm:completion-audit", "epm:done",
    "epm:failure",
]
# How a person reads a marker on the timeline; unlisted ones are spelled out from the name.
MARKER_LABELS = {
    "epm:clarify": "Clarifying questions", "epm:clarify-answers": "Your answers",
    "epm:plan": "Plan", "epm:consistency": "Consistency check",
    "epm:textbox-answers": "Your checklist answers", "epm:pod-dispatched": "Pods dispatched",
    "epm:progress": "Progress", "epm:results": "Results", "epm:clean-result": "Clean result",
    "epm:awaiting-promotion": "Ready to promote", "epm:promoted": "Promoted", "epm:done": "Done",
    "epm:failure": "Failure", "epm:follow-ups": "Follow-ups", "epm:test-verdict": "Test verdict",
    "epm:preflight": "Preflight", "epm:completion-audit": "Completion audit",
}


# The timeline's marker filter offers these groups, in the journey's order, rather than every
# marker: a person looks for "the code review", not for each reviewer's own marker.
MARKER_GROUPS = {
    "questions": ("Questions and answers", ("epm:clarify", "epm:clarify-answers", "epm:textbox-answers")),
    "plan": ("Plan and its review", ("epm:plan", "epm:consistency", "epm:reviewer-verdict",
                                     "epm:reviewer-verdict-codex", "epm:review-reconcile", "epm:reviewer-pass",
                                     "epm:reviewer-decision", "epm:reviewer-ensemble-final")),
    "code": ("Code, its review and tests", ("epm:experiment-implementation", "epm:code-review",
                                            "epm:code-review-codex", "epm:code-review-reconcile",
                                            "epm:test-verdict")),
    "pods": ("Pods and their progress", ("epm:preflight", "epm:launch", "epm:pod-dispatched", "epm:progress",
                                         "epm:upload-verification")),
    "analysis": ("Analysis and its critique", ("epm:results", "epm:interpretation", "epm:interp-critique",
                                               "epm:interp-critique-codex", "epm:interp-revision")),
    "result": ("Clean result and its checks", ("epm:clean-result", "epm:clean-result-critique",
                                               "epm:clean-result-critique-codex",
                                               "epm:clean-result-critique-reconcile", "epm:clean-result-lint",
                                               "epm:completion-audit")),
    "ending": ("Promotion and follow-ups", ("epm:awaiting-promotion", "epm:promoted", "epm:follow-ups",
                                            "epm:done")),
    "failure": ("Failures", ("epm:failure",)),
}


def markers_matching(choice: str | None) -> tuple[str, ...]:
    """The markers a timeline filter value selects: a group's, or one marker named exactly
    (links and API clients may name one); nothing for an unknown value."""
    if choice in MARKER_GROUPS:
        return MARKER_GROUPS[choice][1]
    return (choice,) if choice in MARKERS else ()


def marker_label(marker: str) -> str:
    if marker in MARKER_LABELS:
        return MARKER_LABELS[marker]
    words = marker.removeprefix("epm:").replace("-", " ")
    return words[:1].upper() + words[1:]


# A status with an underscore or a marker, as a whole word: the names a note may carry.
_INTERNAL_NAME = re.compile(
    r"(?<![\w:-])(" + "|".join(re.escape(n) for n in sorted(
        [s.name for s in STATUSES if "_" in s.name] + MARKERS, key=len, reverse=True)) + r")(?![\w-])",
    re.IGNORECASE)


def humanize(text: str) -> str:
    """`text` with every status name (awaiting_clarifications) and marker (epm:clarify) in
    it written as a person reads it."""
    def word(match):
        name = match.group(1).lower()
        return marker_label(name) if name.startswith("epm:") else STATUS_BY_NAME[name].label
    return _INTERNAL_NAME.sub(word, text)


REVIEW_PAIRS = ["code_review", "interpretation", "clean_result"]
REVIEW_VERDICTS = ["pass", "needs_targeted_fix", "blocked_needs_user_decision",
                   "fail_not_worth_continuing"]
REVIEW_MAX_ROUNDS = 3

# A planning request that arrived while the previous planner was still on its last turn
# (services/workflow/orchestration.py); a run event type.
QUEUED_PLANNING_EVENT = "planning_queued"
