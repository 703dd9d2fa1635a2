"""The weekly review (SPEC §12.3): a week of the record told for the owner and their mentor.

A week is the seven owner-days ending on the review day (Settings `weekly_review_day`,
default Sunday, in SAGAN_TIME_ZONE); a review is keyed by that last day (`week_end`, unique),
so a drafting job that runs twice, or two racing, leave one review.

Drafting writes the first version from the record alone — results that landed with their
confidence, belief changes, what failed and why, spend (agents and GPU apart, agent spend by
run classification), proposals for next week — every line citing its experiments as `#N`.
No model is needed: without an Anthropic key the review is still drafted, and with one the
weekly-review agent (agents/weekly-review.md) then reads the week and saves a better draft as
the next version and suggests each run's classification. The owner edits (every save a new
version, a stale base refused) and publishes; a share link shows only the published version,
with the research questions frozen as they stood when it was published (the mentor update).

Other packages hear of a new review through `on_drafted` (email: "weekly review drafted").
"""
from __future__ import annotations

import logging
import re
import uuid
from datetime import date, datetime, time, timedelta, timezone
from typing import Callable

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from models import (AgentRun, Belief, BeliefVersion, CleanResultVersion, Experiment, Project, PromotedResult,
                    WeeklyReview, WeeklyReviewVersion, WorkflowEvent, db)
from services.core import registry, settings
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import Conflict, NotFound, ValidationError
from services.core.redact import redact
from services.core.sanitize import clean_markdown_document, render_markdown
from services.day import daily_log
from services.dispatch import spend
from services.research import beliefs, links, projects
from services.results.result_lint import confidence_of, title_without_confidence
from services.workflow import email_notify, jobs, orchestration, runs

log = logging.getLogger(__name__)

AGENT = "weekly-review"
SCOPE = "weekly_review"
DRAFT_JOB = "workers.day.draft_weekly_review"
LIST_LIMIT = 40
REASON_CHARS = 200
DEFAULT_DAY = "sunday"
DEFAULT_HOUR = 18
# Experiment statuses that count as "failed or stuck" for the week's failures.
FAILED_STATUSES = ("failed", "blocked")

# Callbacks run after a review is drafted and committed (the email notifier registers one).
_DRAFTED_HOOKS: list[Callable[[WeeklyReview], None]] = []


def on_drafted(callback: Callable[[WeeklyReview], None]) -> None:
    """Call `callback(review)` after every newly drafted review is committed (never for the
    second run of a job that found the week drafted already). A callback that raises is logged."""
    _DRAFTED_HOOKS.append(callback)


def _announce(review: WeeklyReview) -> None:
    for callback in list(_DRAFTED_HOOKS):
        try:
            callback(review)
        except Exception:  # noqa: BLE001 - a notifier's failure must not undo the review
            log.exception("weekly review: a drafted hook failed")


# --- the schedule ----------------------------------------------------------------------------

def clean_day(raw) -> str:
    name = str(raw or "").strip().lower()
    if name not in registry.WEEKDAYS:
        raise ValidationError("The review day is a day of the week, e.g. sunday.", field="weekly_review_day")
    return name


def clean_hour(raw) -> int:
    try:
        hour = int(str(raw).strip())
    except (TypeError, ValueError):
        hour = -1
    if not 0 <= hour <= 23:
        raise ValidationError("The review hour is a whole hour from 0 to 23.", field="weekly_review_hour")
    return hour


def check_schedule_config(config) -> None:
    """ValueError, saying so, for a SAGAN_WEEKLY_REVIEW_DAY or _HOUR that is not one (start-up)."""
    try:
        clean_day(config.get("SAGAN_WEEKLY_REVIEW_DAY", DEFAULT_DAY))
        clean_hour(config.get("SAGAN_WEEKLY_REVIEW_HOUR", DEFAULT_HOUR))
    except ValidationError as exc:
        raise ValueError(f"SAGAN_WEEKLY_REVIEW_DAY/HOUR: {exc.message}") from None


def schedule() -> tuple[str, int]:
    """(day name, hour) the review is drafted at, in the owner's time zone."""
    day = settings.get("weekly_review_day") or DEFAULT_DAY
    hour = settings.get("weekly_review_hour")
    return (day if day in registry.WEEKDAYS else DEFAULT_DAY,
            hour if isinstance(hour, int) and 0 <= hour <= 23 else DEFAULT_HOUR)


def save_schedule(day, hour) -> None:
    """Set the review day and hour (Settings); the caller commits."""
    settings.put("weekly_review_day", clean_day(day))
    settings.put("weekly_review_hour", clean_hour(hour))


def week_end_for(day: date) -> date:
    """The review day on or after `day`: the last day of the week `day` belongs to."""
    target = registry.WEEKDAYS.index(schedule()[0])
    return day + timedelta(days=(target - day.weekday()) % 7)


def week_start(review: WeeklyReview) -> date:
    return review.week_end - timedelta(days=6)


def week_bounds(week_end: date) -> tuple[datetime, datetime]:
    """The week's first instant and the instant after it, in UTC."""
    return daily_log.bounds(week_end - timedelta(days=6))[0], daily_log.bounds(week_end)[1]


def due_week_end(now: datetime | None = None) -> date:
    """The newest week whose drafting moment (its review day at the review hour) has passed."""
    now = now or utcnow()
    zone = daily_log.owner_zone()
    local = now.astimezone(zone)
    week_end = week_end_for(local.date())
    if week_end > local.date() or local.time() < time(schedule()[1]):
        week_end -= timedelta(days=7)
    return week_end


def parse_week(text) -> date:
    """A week named by its last day, YYYY-MM-DD (a review day), that has begun; a clear error otherwise."""
    shape = "Name the week by its last day as YYYY-MM-DD, e.g. 2026-12-06."
    if not isinstance(text, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text.strip()):
        raise ValidationError(shape, field="week")
    try:
        day = date.fromisoformat(text.strip())
    except ValueError:
        raise ValidationError(f"{text.strip()} is not a date on the calendar.", field="week")
    if week_end_for(day) != day:
        raise ValidationError(f"{day.isoformat()} is not a review day ({schedule()[0]}); the week containing it "
                              f"ends {week_end_for(day).isoformat()}.", field="week")
    if day - timedelta(days=6) > daily_log.today():
        raise ValidationError(f"The week ending {day.isoformat()} has not begun.", field="week")
    return day


# --- gathering a week ------------------------------------------------------------------------

def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(timezone.utc).isoformat() if moment else None


def _learned(start: datetime, end: datetime) -> list[dict]:
    """Results that landed: each experiment's newest clean result saved in the week (or its
    promotion), with the confidence its title states."""
    newest_saved = (sa.select(CleanResultVersion.experiment_id, sa.func.max(CleanResultVersion.created_at).label("at"))
                    .where(CleanResultVersion.created_at >= start, CleanResultVersion.created_at < end)
                    .group_by(CleanResultVersion.experiment_id).subquery())
    rows = db.session.execute(
        sa.select(Experiment.number, CleanResultVersion.title, newest_saved.c.at, PromotedResult.promoted_to)
        .join(newest_saved, newest_saved.c.experiment_id == Experiment.id)
        .join(CleanResultVersion, sa.and_(CleanResultVersion.experiment_id == Experiment.id,
                                          CleanResultVersion.created_at == newest_saved.c.at))
        .outerjoin(PromotedResult, PromotedResult.experiment_id == Experiment.id)
        .order_by(Experiment.number).limit(LIST_LIMIT)).all()
    seen, learned = set(), []
    for number, title, at, promoted_to in rows:
        if number in seen:
            continue
        seen.add(number)
        learned.append({"experimentNumber": number, "title": title_without_confidence(title),
                        "confidence": confidence_of(title), "promotedTo": promoted_to, "at": _iso(at)})
    return learned


def _belief_changes(start: datetime, end: datetime) -> list[dict]:
    rows = db.session.execute(
        sa.select(Belief.number, BeliefVersion.title, BeliefVersion.version, BeliefVersion.status,
                  BeliefVersion.confidence, Experiment.number)
        .join(Belief, Belief.id == BeliefVersion.belief_id)
        .outerjoin(Experiment, Experiment.id == BeliefVersion.experiment_id)
        .where(BeliefVersion.created_at >= start, BeliefVersion.created_at < end)
        .order_by(BeliefVersion.created_at, BeliefVersion.version).limit(LIST_LIMIT)).all()
    return [{"beliefNumber": number, "label": beliefs.label(number), "title": title, "version": version,
             "status": status, "confidence": confidence, "experimentNumber": experiment_number}
            for number, title, version, status, confidence, experiment_number in rows]


def _failures(start: datetime, end: datetime) -> list[dict]:
    """Experiments that ended the week's moves failed or blocked (with the note that said why),
    and agent runs that failed (with their reason)."""
    moved = db.session.execute(
        sa.select(Experiment.number, Experiment.title, WorkflowEvent.to_status, WorkflowEvent.note)
        .join(Experiment, Experiment.id == WorkflowEvent.experiment_id)
        .where(WorkflowEvent.event_type == "state_changed", WorkflowEvent.to_status.in_(FAILED_STATUSES),
               WorkflowEvent.created_at >= start, WorkflowEvent.created_at < end)
        .order_by(WorkflowEvent.created_at).limit(LIST_LIMIT)).all()
    failed_runs = db.session.execute(
        sa.select(Experiment.number, Experiment.title, AgentRun.agent, AgentRun.failure_reason, AgentRun.last_error)
        .join(Experiment, sa.and_(AgentRun.scope_kind == "experiment", Experiment.id == AgentRun.scope_id))
        .where(AgentRun.status == "failed", AgentRun.created_at >= start, AgentRun.created_at < end)
        .order_by(AgentRun.created_at).limit(LIST_LIMIT)).all()
    items = [{"experimentNumber": number, "title": title, "what": status,
              "why": " ".join((note or "").split())[:REASON_CHARS] or None}
             for number, title, status, note in moved]
    items += [{"experimentNumber": number, "title": title, "what": f"{agent} run failed",
               "why": (reason or "").replace("_", " ") + (": " if reason and error else "")
               + " ".join((error or "").split())[:REASON_CHARS] or None}
              for number, title, agent, reason, error in failed_runs]
    return items


def _proposals() -> list[dict]:
    """For next week: experiments waiting as proposals, and the next tests of active beliefs."""
    proposed = db.session.execute(
        sa.select(Experiment.number, Experiment.title).where(Experiment.status == "proposed")
        .order_by(Experiment.number.desc()).limit(LIST_LIMIT)).all()
    tests = db.session.execute(
        sa.select(Belief.number, Belief.title, Belief.next_test)
        .where(Belief.status.in_(("active", "weakened")), Belief.next_test != "")
        .order_by(Belief.number).limit(LIST_LIMIT)).all()
    return ([{"kind": "experiment", "experimentNumber": n, "title": t} for n, t in proposed]
            + [{"kind": "belief_test", "label": beliefs.label(n), "title": t, "nextTest": nt} for n, t, nt in tests])


def gather(week_end: date, now: datetime | None = None) -> dict:
    """The week as the record tells it (structured, camelCase): a fixed number of queries."""
    now = now or utcnow()
    start, week_stop = week_bounds(week_end)
    end = min(week_stop, now)
    money = spend.spend_between(start, end, now)
    by_class = spend.agent_spend_by_classification(start, end)
    return {
        "weekEnd": week_end.isoformat(), "weekStart": (week_end - timedelta(days=6)).isoformat(),
        "timeZone": str(daily_log.owner_zone()), "from": _iso(start), "to": _iso(week_stop),
        "learned": _learned(start, end), "beliefChanges": _belief_changes(start, end),
        "failures": _failures(start, end), "proposals": _proposals(),
        "spend": {"agentsUsd": round(money.agents_usd, 4), "agentRuns": money.agent_runs,
                  "agentsUnpriced": money.agents_unpriced, "gpuUsd": round(money.gpu_usd, 4), "pods": money.pods,
                  "gpuUnpriced": money.gpu_unpriced, "totalUsd": round(money.total_usd, 4),
                  "agentsByClassification": by_class},
    }


def render_draft(summary: dict) -> str:
    """The record's draft as markdown; every line about an experiment cites it as #N — never at
    a line's start, where markdown would read "#12 …" as a heading. The page names the week, so
    the text starts with its first section."""
    lines = ["## What we learned", ""]
    for item in summary["learned"]:
        confidence = f", {item['confidence']} confidence" if item["confidence"] else ", confidence not stated"
        shared = ", shared" if item["promotedTo"] == "shared" else ""
        lines.append(f"- {item['title']} (#{item['experimentNumber']}{confidence}{shared})")
    if not summary["learned"]:
        lines.append("- No result landed this week.")
    lines += ["", "## Belief changes", ""]
    for change in summary["beliefChanges"]:
        evidence = f", on #{change['experimentNumber']}" if change["experimentNumber"] else ""
        what = "new" if change["version"] == 1 else f"v{change['version']}"
        lines.append(f"- {change['label']} {change['title']} ({what}): {change['status']}, "
                     f"{change['confidence']}{evidence}")
    if not summary["beliefChanges"]:
        lines.append("- No belief changed.")
    lines += ["", "## What failed and why", ""]
    for failure in summary["failures"]:
        why = f": {failure['why']}" if failure["why"] else " (no reason recorded)"
        lines.append(f"- {failure['title']} (#{failure['experimentNumber']}) — {failure['what']}{why}")
    if not summary["failures"]:
        lines.append("- Nothing failed.")
    money = summary["spend"]
    split = money["agentsByClassification"]
    lines += ["", "## Spend", "",
              f"- Agents: ${money['agentsUsd']:,.2f} over {money['agentRuns']} run(s) — useful "
              f"${split['useful']['usd']:,.2f}, not useful ${split['not_useful']['usd']:,.2f}, "
              f"unclassified ${split['pending']['usd']:,.2f}, archived ${split['archived']['usd']:,.2f}",
              f"- GPU: ${money['gpuUsd']:,.2f} over {money['pods']} pod(s)",
              f"- Total: ${money['totalUsd']:,.2f}", "", "## Proposals for next week", ""]
    for proposal in summary["proposals"]:
        if proposal["kind"] == "experiment":
            lines.append(f"- Run #{proposal['experimentNumber']}: {proposal['title']}")
        else:
            lines.append(f"- Test {proposal['label']} ({proposal['title']}): {proposal['nextTest']}")
    if not summary["proposals"]:
        lines.append("- Nothing proposed yet.")
    return "\n".join(lines) + "\n"


# --- reviews ---------------------------------------------------------------------------------

def by_week(week_end: date) -> WeeklyReview | None:
    return db.session.scalar(sa.select(WeeklyReview).where(WeeklyReview.week_end == week_end))


def get_review(key) -> WeeklyReview:
    """A review by its id or by its week (YYYY-MM-DD, the week's last day); NotFound otherwise."""
    text = str(key or "").strip()
    review = None
    try:
        review = db.session.get(WeeklyReview, uuid.UUID(text))
    except ValueError:
        try:
            review = by_week(date.fromisoformat(text))
        except ValueError:
            pass
    if review is None:
        raise NotFound(f"No weekly review {text[:40]}.")
    return review


def newest(limit: int = 30, offset: int = 0) -> list[WeeklyReview]:
    return list(db.session.scalars(sa.select(WeeklyReview).order_by(WeeklyReview.week_end.desc())
                                   .limit(limit).offset(offset)))


def draft(week_end: date, drafted_by: str, now: datetime | None = None) -> tuple[WeeklyReview, bool]:
    """Draft the week's review from the record: (review, True) when this call drafted it,
    (the review already there, False) otherwise. The unique week makes a second run, or a
    racing one, find the first one's review. Commits; then starts the agent when a key is set."""
    if drafted_by not in ("scheduler", "owner", "token", "demo"):
        raise ValueError(f"unknown drafter {drafted_by!r}")
    now = now or utcnow()
    existing = by_week(week_end)
    if existing is not None:
        return existing, False
    if week_end_for(week_end) != week_end:
        raise ValidationError(f"{week_end.isoformat()} is not a review day.", field="week")
    if week_end - timedelta(days=6) > daily_log.today(now):
        raise ValidationError(f"The week ending {week_end.isoformat()} has not begun.", field="week")
    summary = gather(week_end, now)
    try:
        with db.session.begin_nested():
            review = WeeklyReview(id=uuid.uuid4(), week_end=week_end, time_zone=summary["timeZone"],
                                  summary=summary, drafted_at=now, drafted_by=drafted_by)
            db.session.add(review)
            db.session.flush()
            db.session.add(WeeklyReviewVersion(id=uuid.uuid4(), review_id=review.id, version=1,
                                               body_md=redact(render_draft(summary)), status="draft",
                                               author_kind="system", author_label="Drafted from the record"))
            db.session.flush()
    except IntegrityError:
        db.session.rollback()
        return by_week(week_end), False
    db.session.commit()
    _start_agent(review)
    _announce(review)
    return review, True


def _start_agent(review: WeeklyReview) -> AgentRun | None:
    """With a model key, the weekly-review agent improves the draft (a later version)."""
    if not orchestration.agents_enabled():
        return None
    request = (f"Write the weekly review {review.id} for the week ending {review.week_end.isoformat()}: read the "
               "week and its draft, save the review, and suggest how useful each of the week's agent runs was.")
    run = runs.create_run(kind="apply", agent=AGENT, request=request, scope_id=review.id, scope_kind=SCOPE)
    db.session.commit()
    jobs.enqueue_run(run.id)
    return run


def week_has_record(week_end: date) -> bool:
    """Did anything happen in the week: an experiment event, an agent run or a belief change?
    One statement."""
    start, end = week_bounds(week_end)
    happened = [sa.select(model.id).where(model.created_at >= start, model.created_at < end).exists()
                for model in (WorkflowEvent, AgentRun, BeliefVersion)]
    return bool(db.session.scalar(sa.select(sa.or_(*happened))))


def draft_due(now: datetime | None = None) -> WeeklyReview | None:
    """The scheduler's part: once the review day's hour has passed, draft that week's review if
    it is missing (one indexed query on every other tick). A week in which nothing happened (a
    new install's first week, a holiday) is not drafted by the scheduler: there is nothing to
    review, and with a model key the agent's run would cost money for an empty page. The owner
    can still draft it by hand."""
    now = now or utcnow()
    week_end = due_week_end(now)
    if by_week(week_end) is not None:
        return None
    if not week_has_record(week_end):  # an EXISTS that stops at the week's first event
        return None
    review, created = draft(week_end, "scheduler", now)
    return review if created else None


def enqueue_draft(week_end: date) -> str:
    """Queue drafting the week (the button, the API): one job per week at a time."""
    return jobs.enqueue_unique(jobs.DEFAULT, DRAFT_JOB, week_end.isoformat(), job_id=f"weekly-review-{week_end}")


def drafting(week_end: date) -> bool:
    """True while the week's drafting job is queued or running."""
    return jobs.job_is_live(f"weekly-review-{week_end}")


def draft_job(week_end_text: str, drafted_by: str = "owner") -> str:
    """The job: draft the week (nothing when it is drafted already); the review's id."""
    review, _ = draft(date.fromisoformat(week_end_text), drafted_by)
    return str(review.id)


# --- versions --------------------------------------------------------------------------------

def versions(review: WeeklyReview) -> list[WeeklyReviewVersion]:
    return list(db.session.scalars(sa.select(WeeklyReviewVersion).where(WeeklyReviewVersion.review_id == review.id)
                                   .order_by(WeeklyReviewVersion.version.desc())))


def latest(review: WeeklyReview) -> WeeklyReviewVersion | None:
    return db.session.scalar(sa.select(WeeklyReviewVersion).where(WeeklyReviewVersion.review_id == review.id)
                             .order_by(WeeklyReviewVersion.version.desc()).limit(1))


def published(review_id) -> WeeklyReviewVersion | None:
    return db.session.scalar(sa.select(WeeklyReviewVersion).where(WeeklyReviewVersion.review_id == review_id,
                                                                  WeeklyReviewVersion.status == "published")
                             .order_by(WeeklyReviewVersion.version.desc()).limit(1))


def get_version(review: WeeklyReview, version) -> WeeklyReviewVersion:
    try:
        number = int(str(version).strip())
    except (TypeError, ValueError):
        raise ValidationError("Name the version by its number.", field="version")
    row = db.session.scalar(sa.select(WeeklyReviewVersion).where(WeeklyReviewVersion.review_id == review.id,
                                                                 WeeklyReviewVersion.version == number))
    if row is None:
        raise NotFound(f"The review has no version {number}.")
    return row


def clean_body(raw) -> str:
    return clean_markdown_document(raw, "The review", "The review is empty; write what the week taught first.")


def _lock(review: WeeklyReview) -> None:
    """Saves and publishes of one review take turns (one version number each, one published)."""
    db.session.execute(sa.select(WeeklyReview.id).where(WeeklyReview.id == review.id).with_for_update())


def save_version(review: WeeklyReview, body, actor: Actor, base_version=None) -> WeeklyReviewVersion:
    """Save the text as the review's next version, a draft; the caller commits. `base_version`
    is the version the editor started from: when a newer one was saved meanwhile, Conflict
    (409) rather than silently dropping it."""
    body = clean_body(body)
    _lock(review)
    current = db.session.scalar(sa.select(sa.func.max(WeeklyReviewVersion.version))
                                .where(WeeklyReviewVersion.review_id == review.id)) or 0
    if base_version not in (None, ""):
        try:
            base = int(str(base_version).strip())
        except ValueError:
            raise ValidationError("The base version is a number.", field="base_version")
        if base != current:
            raise Conflict(f"Version {current} was saved after the version {base} you edited; reload the review "
                           "and make your change again.")
    row = WeeklyReviewVersion(id=uuid.uuid4(), review_id=review.id, version=current + 1, body_md=body,
                              status="draft", author_kind=actor.kind, author_label=(actor.label or "")[:120])
    db.session.add(row)
    db.session.flush()
    return row


def research_questions() -> list[dict]:
    """The mentor update's questions, per active project: each belief Established (citing its
    experiments) or Open, with its next step — the project page's own reading of its beliefs,
    public text only (no evidence notes, no proposals)."""
    answer = []
    for project in db.session.scalars(sa.select(Project).where(Project.status == "active").order_by(Project.title)):
        page = projects.page(project)
        questions = [{"label": beliefs.label(q.belief.number), "title": q.belief.title,
                      "currentBelief": q.belief.current_belief or "", "status": q.belief.status,
                      "established": q.established, "cited": q.cited, "nextStep": q.next_step}
                     for q in page.research_questions]
        if questions:
            answer.append({"project": project.title, "questions": questions})
    return answer


def publish(review: WeeklyReview, version, actor: Actor) -> WeeklyReviewVersion:
    """Publish one version (the one published before is archived) with the research questions
    as they stand now; publishing the published version again changes nothing. The caller commits."""
    _lock(review)
    row = get_version(review, version)
    if row.status == "published":
        return row
    db.session.execute(sa.update(WeeklyReviewVersion)
                       .where(WeeklyReviewVersion.review_id == review.id, WeeklyReviewVersion.status == "published")
                       .values(status="archived").execution_options(synchronize_session="fetch"))
    row.status = "published"
    row.published_at = utcnow()
    row.questions = research_questions()
    db.session.flush()
    return row


RUNS_SHOWN = 200


def week_runs(review: WeeklyReview, limit: int = RUNS_SHOWN) -> list[dict]:
    """The agent runs started in the review's week, dearest first, with their classification
    (what the agent classifies and the review page lists). One query."""
    start, end = week_bounds(review.week_end)
    run_start = sa.func.coalesce(AgentRun.started_at, AgentRun.created_at)
    rows = db.session.execute(
        sa.select(AgentRun.id, AgentRun.agent, AgentRun.kind, AgentRun.status, AgentRun.cost_usd,
                  AgentRun.classification, AgentRun.classification_by, AgentRun.request, Experiment.number)
        .outerjoin(Experiment, sa.and_(AgentRun.scope_kind == "experiment", Experiment.id == AgentRun.scope_id))
        .where(run_start >= start, run_start < end)
        .order_by(AgentRun.cost_usd.desc().nulls_last(), AgentRun.created_at).limit(limit)).all()
    return [{"id": str(row.id), "agent": row.agent, "kind": row.kind, "status": row.status,
             "costUsd": row.cost_usd, "classification": row.classification, "classificationBy": row.classification_by,
             "experimentNumber": row.number, "request": " ".join((row.request or "").split())[:200]} for row in rows]


def mentor_markdown(body_md: str) -> str:
    """The review text as a mentor reads it: without its "Spend" section (SPEC §8.5: no costs
    reach a share link), whoever wrote it."""
    kept, skipping = [], False
    for line in body_md.splitlines():
        if line.startswith("## ") or line.startswith("# "):
            skipping = line.lstrip("#").strip().lower().startswith("spend")
        if not skipping:
            kept.append(line)
    return "\n".join(kept)


def mentor_update(review_id) -> tuple[WeeklyReview, WeeklyReviewVersion, str] | None:
    """What a share link shows: the review, its published version and that version's text as
    sanitized HTML without costs; None while nothing is published."""
    review = db.session.get(WeeklyReview, review_id)
    public = published(review_id) if review is not None else None
    if public is None:
        return None
    return review, public, render_markdown(mentor_markdown(public.body_md))


# --- mentor accounts -------------------------------------------------------------------------
# A review spans every project, so no mentor account reads one by its projects: only a review the
# owner showed to mentor accounts (`shown_to_mentors`), and then only its published version.

SHOWN_LISTED = 20


def show_to_mentors(review: WeeklyReview, shown: bool) -> bool:
    """Show (or stop showing) the review's published version to every mentor account; answers
    whether anything changed. The caller commits."""
    changed = review.shown_to_mentors != bool(shown)
    review.shown_to_mentors = bool(shown)
    return changed


def shown_to_mentors(limit: int = SHOWN_LISTED) -> list:
    """The reviews a mentor account may read, newest week first: shown and published (one query).
    Rows: week_end, version, published_at."""
    return db.session.execute(
        sa.select(WeeklyReview.week_end, WeeklyReviewVersion.version, WeeklyReviewVersion.published_at)
        .join(WeeklyReviewVersion, sa.and_(WeeklyReviewVersion.review_id == WeeklyReview.id,
                                           WeeklyReviewVersion.status == "published"))
        .where(WeeklyReview.shown_to_mentors.is_(True))
        .order_by(WeeklyReview.week_end.desc()).limit(limit)).all()


def mentor_update_shown(key) -> tuple[WeeklyReview, WeeklyReviewVersion, str]:
    """The mentor update of a review the owner showed to mentor accounts; NotFound for one not
    shown, not published or not there — the same sentence for each."""
    try:
        review = get_review(key)
    except NotFound:
        review = None
    shown = mentor_update(review.id) if review is not None and review.shown_to_mentors else None
    if shown is None:
        raise NotFound("No weekly review of that week was shown to you.")
    return shown


def version_numbers(review_ids) -> dict:
    """Review id → (latest version, published version or None), for many reviews in one query."""
    ids = list(review_ids)
    if not ids:
        return {}
    rows = db.session.execute(
        sa.select(WeeklyReviewVersion.review_id, sa.func.max(WeeklyReviewVersion.version),
                  sa.func.max(WeeklyReviewVersion.version).filter(WeeklyReviewVersion.status == "published"))
        .where(WeeklyReviewVersion.review_id.in_(ids)).group_by(WeeklyReviewVersion.review_id))
    return {review_id: (newest_version, public) for review_id, newest_version, public in rows}


def list_json(reviews: list[WeeklyReview]) -> list[dict]:
    """The API's list: two queries whatever the number of reviews."""
    numbers = version_numbers(review.id for review in reviews)
    return [_head_json(review, *numbers.get(review.id, (None, None))) for review in reviews]


def _head_json(review: WeeklyReview, latest_version, published_version) -> dict:
    return {"id": str(review.id), "weekEnd": review.week_end.isoformat(),
            "weekStart": (review.week_end - timedelta(days=6)).isoformat(), "timeZone": review.time_zone,
            "draftedAt": _iso(review.drafted_at), "draftedBy": review.drafted_by,
            "latestVersion": latest_version, "publishedVersion": published_version,
            "url": f"/reviews/{review.week_end}"}


def to_json(review: WeeklyReview, *, full: bool = True) -> dict:
    current = latest(review)
    public = published(review.id)
    answer = _head_json(review, current.version if current else None, public.version if public else None)
    if full:
        answer.update(summary=review.summary, bodyMd=current.body_md if current else "",
                      versions=[version_json(v) for v in versions(review)])
    return answer


def version_json(row: WeeklyReviewVersion) -> dict:
    return {"version": row.version, "status": row.status, "authorKind": row.author_kind,
            "authorLabel": row.author_label, "createdAt": _iso(row.created_at), "publishedAt": _iso(row.published_at)}


# --- links: a review is a record ("review:2026-12-06") ----------------------------------------

def _find_by_reference(text: str) -> WeeklyReview | None:
    cleaned = text.strip().lower()
    for prefix in ("review:", "weekly_review:"):
        if cleaned.startswith(prefix):
            cleaned = cleaned[len(prefix):].strip()
    try:
        return by_week(date.fromisoformat(cleaned))
    except ValueError:
        return None


def _find_typed(text: str) -> WeeklyReview | None:
    """Only "review:YYYY-MM-DD": a bare date stays the daily log's to claim (or nobody's)."""
    if not text.strip().lower().startswith("review:"):
        return None
    review = _find_by_reference(text)
    if review is None:
        raise NotFound(f"No weekly review for the week ending {text.strip()[7:].strip()}.")
    return review


links.register("weekly_review", links.Resolver(
    "weekly review", lambda review_id: db.session.get(WeeklyReview, review_id),
    lambda review: f"Review of the week ending {review.week_end.isoformat()}",
    lambda review: f"/reviews/{review.week_end.isoformat()}", _find_by_reference, model=WeeklyReview))
links.register_shorthand("weekly_review", _find_typed)


def _email_the_owner(review: WeeklyReview) -> None:
    """The "weekly review drafted" email (it never raises; held by quiet hours like the rest)."""
    email_notify.notify_weekly_review_drafted(
        review.id, f"the week ending {review.week_end.isoformat()}",
        f"/reviews/{review.week_end.isoformat()}")


on_drafted(_email_the_owner)
