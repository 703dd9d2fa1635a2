"""The daily log (SPEC §12.3): one entry per day in the owner's time zone, written from the
record without a model — results that landed, experiments that moved, pods that finished or
failed, belief updates, literature added, and the day's spend (agents and GPU apart).

An entry is stored twice over: `summary`, structured JSON (camelCase, as the API answers it)
that a page and a later weekly review both read, and `body_md`, the same as markdown. It is
gathered in a fixed handful of aggregate queries whatever the size of the day.

The scheduler writes yesterday's entry once the day has ended, and catches up on days missed
while the workers were down (`write_due_days`); the owner can write today so far, or rewrite
any past day, on demand. Writing is an upsert on
the unique day, so two schedulers racing on the same day leave one entry.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
from flask import current_app
from sqlalchemy.exc import IntegrityError

from models import (Belief, BeliefVersion, CleanResultVersion, DailyLogEntry, Experiment, LiteratureItem, Pod,
                    PromotedResult, WorkflowEvent, db)
from services.core.clock import utcnow
from services.core.errors import NotFound, ValidationError
from services.dispatch import spend
from services.research import beliefs, links

# A day's lists can be long (a feed adds forty papers); the entry shows this many of each and counts the rest.
LIST_LIMIT = 50
FAILED_POD_STATUSES = ("failed", "vanished")
REASON_CHARS = 200
# How many ended days the scheduler looks back over for entries it owes (workers down over a weekend).
CATCH_UP_DAYS = 7


# --- days in the owner's time zone -------------------------------------------------------

def zone_named(name: str | None) -> ZoneInfo:
    """The time zone SAGAN_TIME_ZONE names (UTC when empty); ValueError, saying so, for a name
    that is not one (checked at start-up, so a typo never files a day under the wrong date)."""
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"SAGAN_TIME_ZONE is {name!r}, which is not a time zone: use an IANA name such as "
                         "Europe/Berlin or America/New_York.")


def owner_zone() -> ZoneInfo:
    """The owner's time zone (SAGAN_TIME_ZONE)."""
    return zone_named(current_app.config.get("SAGAN_TIME_ZONE"))


def today(now: datetime | None = None) -> date:
    """The owner's date now."""
    return (now or utcnow()).astimezone(owner_zone()).date()


def bounds(day: date) -> tuple[datetime, datetime]:
    """The day's first instant and the next day's, in UTC (23 or 25 hours on a DST change)."""
    zone = owner_zone()
    start = datetime.combine(day, time.min, tzinfo=zone).astimezone(timezone.utc)
    end = datetime.combine(day + timedelta(days=1), time.min, tzinfo=zone).astimezone(timezone.utc)
    return start, end


def parse_day(text, *, now: datetime | None = None) -> date:
    """A day named as YYYY-MM-DD that has begun (today or earlier); a clear error otherwise."""
    if not isinstance(text, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text.strip()):
        raise ValidationError("Name the day as YYYY-MM-DD, e.g. 2026-12-01.", field="day")
    try:
        day = date.fromisoformat(text.strip())
    except ValueError:
        raise ValidationError(f"{text.strip()} is not a date on the calendar.", field="day")
    if day > today(now):
        raise ValidationError(f"{day.isoformat()} has not happened yet: the log has days up to today "
                              f"({today(now).isoformat()}).", field="day")
    return day


# --- gathering a day from the record -------------------------------------------------------

def _experiment_url(number: int, anchor: str = "") -> str:
    return f"/experiments/{number}" + (f"#{anchor}" if anchor else "")


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(timezone.utc).isoformat() if moment else None


def _shown(rows: list) -> list:
    """The first LIST_LIMIT of a day's list; `counts` keeps the whole number."""
    return rows[:LIST_LIMIT]


def _results(start: datetime, end: datetime) -> list[dict]:
    """Clean results saved (one line per experiment, however many saves) and promoted."""
    saved = db.session.execute(
        sa.select(Experiment.number, Experiment.title, sa.func.count(), sa.func.max(CleanResultVersion.created_at))
        .join(Experiment, Experiment.id == CleanResultVersion.experiment_id)
        .where(CleanResultVersion.created_at >= start, CleanResultVersion.created_at < end)
        .group_by(Experiment.number, Experiment.title)).all()
    promoted = db.session.execute(
        sa.select(Experiment.number, PromotedResult.title, PromotedResult.promoted_to, PromotedResult.promoted_at)
        .join(Experiment, Experiment.id == PromotedResult.experiment_id)
        .where(PromotedResult.promoted_at >= start, PromotedResult.promoted_at < end)).all()
    items = [{"event": "saved", "experimentNumber": number, "title": title, "saves": int(saves), "at": _iso(last),
              "url": _experiment_url(number, "clean-result")} for number, title, saves, last in saved]
    items += [{"event": "promoted", "experimentNumber": number, "title": title, "promotedTo": to, "at": _iso(at),
               "url": _experiment_url(number, "clean-result")} for number, title, to, at in promoted]
    return sorted(items, key=lambda item: (item["at"] or "", item["experimentNumber"]))


def _moves(start: datetime, end: datetime) -> list[dict]:
    """Each experiment whose status changed: where it started the day, where it ended it."""
    rows = db.session.execute(
        sa.select(Experiment.number, Experiment.title, WorkflowEvent.from_status, WorkflowEvent.to_status,
                  WorkflowEvent.created_at)
        .join(Experiment, Experiment.id == WorkflowEvent.experiment_id)
        .where(WorkflowEvent.event_type == "state_changed", WorkflowEvent.created_at >= start,
               WorkflowEvent.created_at < end)
        .order_by(WorkflowEvent.created_at, WorkflowEvent.id)).all()
    moved: dict[int, dict] = {}
    for number, title, from_status, to_status, at in rows:
        move = moved.setdefault(number, {"experimentNumber": number, "title": title, "from": from_status,
                                         "steps": 0, "url": _experiment_url(number)})
        move.update(to=to_status, steps=move["steps"] + 1, at=_iso(at))
    return sorted(moved.values(), key=lambda move: move["experimentNumber"])


def _pods(start: datetime, end: datetime) -> tuple[list[dict], list[dict]]:
    """Pods that ended in the day: (finished, failed). A pod failed when it ended failed or
    vanished, or exited with a code other than 0."""
    rows = db.session.execute(
        sa.select(Pod.name, Pod.status, Pod.exit_code, Pod.gpu_type_id, Pod.gpu_count, Pod.ended_at,
                  Pod.last_error, Pod.stop_reason, Experiment.number)
        .join(Experiment, Experiment.id == Pod.experiment_id)
        .where(Pod.ended_at >= start, Pod.ended_at < end)
        .order_by(Pod.ended_at, Pod.name)).all()
    finished, failed = [], []
    for name, status, exit_code, gpu, count, ended_at, error, stop_reason, number in rows:
        did_fail = status in FAILED_POD_STATUSES or (exit_code is not None and exit_code != 0)
        item = {"name": name, "experimentNumber": number, "status": status, "exitCode": exit_code,
                "gpu": f"{count or 1}× {gpu}" if gpu else None, "endedAt": _iso(ended_at),
                "stopReason": stop_reason, "url": _experiment_url(number, "pods")}
        if did_fail:
            item["reason"] = (error or "").strip()[:REASON_CHARS] or None
        (failed if did_fail else finished).append(item)
    return finished, failed


def _belief_updates(start: datetime, end: datetime) -> list[dict]:
    """Versions of beliefs made in the day: created, or updated (an accepted proposal or an edit)."""
    rows = db.session.execute(
        sa.select(Belief.number, BeliefVersion.title, BeliefVersion.version, BeliefVersion.status,
                  BeliefVersion.confidence, BeliefVersion.author_kind, BeliefVersion.proposal_id,
                  BeliefVersion.created_at, Experiment.number)
        .join(Belief, Belief.id == BeliefVersion.belief_id)
        .outerjoin(Experiment, Experiment.id == BeliefVersion.experiment_id)
        .where(BeliefVersion.created_at >= start, BeliefVersion.created_at < end)
        .order_by(BeliefVersion.created_at, BeliefVersion.version)).all()
    return [{"beliefNumber": number, "label": beliefs.label(number), "title": title, "version": version,
             "status": status, "confidence": confidence, "created": version == 1,
             "fromProposal": proposal_id is not None, "experimentNumber": experiment_number, "at": _iso(at),
             "url": f"/beliefs/{number}"}
            for number, title, version, status, confidence, _author, proposal_id, at, experiment_number in rows]


def _literature(start: datetime, end: datetime) -> list[dict]:
    rows = db.session.execute(
        sa.select(LiteratureItem.id, LiteratureItem.title, LiteratureItem.authors, LiteratureItem.year,
                  LiteratureItem.source)
        .where(LiteratureItem.created_at >= start, LiteratureItem.created_at < end)
        .order_by(LiteratureItem.created_at, LiteratureItem.title)).all()
    return [{"id": str(item_id), "title": title, "firstAuthor": (authors or [""])[0], "year": year,
             "source": source, "url": f"/library/{item_id}"} for item_id, title, authors, year, source in rows]


def gather(day: date, now: datetime | None = None) -> dict:
    """The day as the record tells it (structured, camelCase): a fixed number of queries."""
    now = now or utcnow()
    start, day_end = bounds(day)
    end = min(day_end, now)  # today so far: what is in the record up to now
    results = _results(start, end)
    moves = _moves(start, end)
    finished, failed = _pods(start, end)
    belief_updates = _belief_updates(start, end)
    literature = _literature(start, end)
    money = spend.spend_between(start, end, now)
    counts = {"results": len(results), "moves": len(moves), "podsFinished": len(finished),
              "podsFailed": len(failed), "beliefUpdates": len(belief_updates), "literature": len(literature)}
    return {
        "day": day.isoformat(), "timeZone": str(owner_zone()), "from": _iso(start), "to": _iso(day_end),
        "counts": counts, "results": _shown(results), "moves": _shown(moves),
        "pods": {"finished": _shown(finished), "failed": _shown(failed)},
        "beliefUpdates": _shown(belief_updates), "literature": _shown(literature),
        "spend": {"agentsUsd": round(money.agents_usd, 4), "agentRuns": money.agent_runs,
                  "agentsUnpriced": money.agents_unpriced, "gpuUsd": round(money.gpu_usd, 4), "pods": money.pods,
                  "gpuUnpriced": money.gpu_unpriced, "totalUsd": round(money.total_usd, 4)},
    }


# --- markdown ------------------------------------------------------------------------------

def _status(name: str | None) -> str:
    return (name or "?").replace("_", " ")


def _more(shown: int, total: int) -> list[str]:
    return [f"- … and {total - shown} more"] if total > shown else []


def render_markdown(summary: dict) -> str:
    """The entry as markdown: a heading per kind of event, the empty ones left out."""
    counts = summary["counts"]
    lines = [f"# {summary['day']}", ""]
    if summary["results"]:
        lines += ["## Results that landed", ""]
        for item in summary["results"]:
            verb = (f"promoted to {item['promotedTo']}" if item["event"] == "promoted"
                    else "clean result saved" + (f" ({item['saves']} saves)" if item.get("saves", 1) > 1 else ""))
            lines.append(f"- [#{item['experimentNumber']}]({item['url']}) {item['title']} — {verb}")
        lines += _more(len(summary["results"]), counts["results"]) + [""]
    if summary["moves"]:
        lines += ["## Experiments that moved", ""]
        for move in summary["moves"]:
            steps = f" ({move['steps']} moves)" if move["steps"] > 1 else ""
            lines.append(f"- [#{move['experimentNumber']}]({move['url']}) {move['title']}: "
                         f"{_status(move['from'])} → {_status(move['to'])}{steps}")
        lines += _more(len(summary["moves"]), counts["moves"]) + [""]
    pods = summary["pods"]
    if pods["finished"] or pods["failed"]:
        lines += ["## Pods", ""]
        for pod in pods["failed"]:
            reason = f": {pod['reason']}" if pod.get("reason") else ""
            code = f", exit {pod['exitCode']}" if pod["exitCode"] not in (None, 0) else ""
            lines.append(f"- **Failed** {pod['name']} on [#{pod['experimentNumber']}]({pod['url']}) "
                         f"({_status(pod['status'])}{code}){reason}")
        for pod in pods["finished"]:
            lines.append(f"- Finished {pod['name']} on [#{pod['experimentNumber']}]({pod['url']}) "
                         f"({_status(pod['status'])})")
        lines += _more(len(pods["failed"]) + len(pods["finished"]),
                       counts["podsFailed"] + counts["podsFinished"]) + [""]
    if summary["beliefUpdates"]:
        lines += ["## Belief updates", ""]
        for update in summary["beliefUpdates"]:
            what = "new belief" if update["created"] else f"v{update['version']}"
            evidence = f", on #{update['experimentNumber']}" if update["experimentNumber"] else ""
            lines.append(f"- [{update['label']}]({update['url']}) {update['title']} — {what}: "
                         f"{update['status']}, {update['confidence']}{evidence}")
        lines += _more(len(summary["beliefUpdates"]), counts["beliefUpdates"]) + [""]
    if summary["literature"]:
        lines += ["## Literature added", ""]
        for item in summary["literature"]:
            author = f" ({item['firstAuthor']}{', ' + str(item['year']) if item['year'] else ''})" \
                if item["firstAuthor"] else ""
            lines.append(f"- [{item['title']}]({item['url']}){author}")
        lines += _more(len(summary["literature"]), counts["literature"]) + [""]
    money = summary["spend"]
    lines += ["## Spend", "",
              f"- Agents: ${money['agentsUsd']:,.2f} over {money['agentRuns']} run(s)"
              + (f", {money['agentsUnpriced']} at an unknown price" if money["agentsUnpriced"] else ""),
              f"- GPU: ${money['gpuUsd']:,.2f} over {money['pods']} pod(s)"
              + (f", {money['gpuUnpriced']} at an unknown rate" if money["gpuUnpriced"] else ""),
              f"- Total: ${money['totalUsd']:,.2f}" + (" (at least)" if money["agentsUnpriced"]
                                                       or money["gpuUnpriced"] else ""), ""]
    if not any(counts.values()) and not money["agentRuns"] and not money["pods"]:
        lines[2:2] = ["Nothing happened in the record this day.", ""]
    return "\n".join(lines)


# --- entries ---------------------------------------------------------------------------------

def get_entry(day: date) -> DailyLogEntry | None:
    return db.session.scalar(sa.select(DailyLogEntry).where(DailyLogEntry.day == day))


def entry_for(text, *, now: datetime | None = None) -> DailyLogEntry:
    """The entry of the day named YYYY-MM-DD; NotFound (with why) when it is not written yet."""
    day = parse_day(text, now=now)
    entry = get_entry(day)
    if entry is None:
        raise NotFound(f"No daily log entry for {day.isoformat()} yet"
                       + (" (the day is not over: write it so far)." if day == today(now)
                          else " (the scheduler writes it once the day has ended, or write it now)."))
    return entry


def newest(limit: int = 30, offset: int = 0) -> list[DailyLogEntry]:
    return list(db.session.scalars(sa.select(DailyLogEntry).order_by(DailyLogEntry.day.desc())
                                   .limit(limit).offset(offset)))


def write(day: date, written_by: str, now: datetime | None = None) -> DailyLogEntry:
    """Write (or rewrite) the day's entry from the record; the same record writes the same entry."""
    if written_by not in ("scheduler", "owner", "token"):
        raise ValueError(f"unknown writer {written_by!r}")
    now = now or utcnow()
    if day > today(now):
        raise ValidationError(f"{day.isoformat()} has not happened yet.", field="day")
    summary = gather(day, now)
    entry = get_entry(day)
    if entry is None:
        entry = DailyLogEntry(day=day)
        db.session.add(entry)
    entry.time_zone = summary["timeZone"]
    entry.summary = summary
    entry.body_md = render_markdown(summary)
    entry.partial = now < bounds(day)[1]
    entry.written_at = now
    entry.written_by = written_by
    db.session.flush()
    return entry


def days_due(now: datetime | None = None) -> list[date]:
    """The ended days whose entry the scheduler owes, oldest first: yesterday, any day since the
    newest entry that has none (the workers were down over a night), back at most CATCH_UP_DAYS,
    and any of those written before the day was over. One query."""
    now = now or utcnow()
    yesterday = today(now) - timedelta(days=1)
    window = [yesterday - timedelta(days=back) for back in range(CATCH_UP_DAYS - 1, -1, -1)]
    written = dict(db.session.execute(sa.select(DailyLogEntry.day, DailyLogEntry.partial)
                                      .where(DailyLogEntry.day >= window[0])).all())
    # Before the first entry there is nothing to catch up on: a new instance starts with yesterday.
    newest = max(written, default=None)
    return [day for day in window
            if (day == yesterday or (newest is not None and day > newest) or written.get(day)) and
            (day not in written or written[day])]


def write_due_days(now: datetime | None = None) -> list[DailyLogEntry]:
    """The scheduler's part: once a day has ended in the owner's time zone, write its entry if
    it is missing or was written before the day was over (and catch up on days missed while
    the workers were down, `days_due`). One indexed query on every other tick. Two schedulers
    racing insert the same unique day: the loser's insert is refused and rolled back to its
    savepoint, and the entry written by the winner stands."""
    now = now or utcnow()
    written = []
    for day in days_due(now):
        try:
            with db.session.begin_nested():
                written.append(write(day, "scheduler", now))
        except IntegrityError:
            continue
        db.session.commit()
    return written


@dataclass(frozen=True)
class DayPage:
    """What /log/<day> shows: the day, its entry (None before it is written), and the days around it."""
    day: date
    entry: DailyLogEntry | None
    previous_day: date
    next_day: date | None
    is_today: bool


def day_page(day: date, now: datetime | None = None) -> DayPage:
    current = today(now)
    return DayPage(day, get_entry(day), day - timedelta(days=1),
                   day + timedelta(days=1) if day < current else None, day == current)


def to_json(entry: DailyLogEntry, *, full: bool = True) -> dict:
    answer = {"id": str(entry.id), "day": entry.day.isoformat(), "timeZone": entry.time_zone,
              "partial": entry.partial, "writtenAt": _iso(entry.written_at), "writtenBy": entry.written_by,
              "counts": entry.summary.get("counts", {}), "spend": entry.summary.get("spend", {})}
    if full:
        answer.update(summary=entry.summary, bodyMd=entry.body_md)
    return answer


# --- links: a day's entry is a record ("log:2026-12-01") ---------------------------------------

def _find_by_reference(text: str) -> DailyLogEntry | None:
    match = re.fullmatch(r"\s*(?:log:|daily_log:)?\s*(\d{4}-\d{2}-\d{2})\s*", text, flags=re.IGNORECASE)
    if not match:
        return None
    try:
        day = date.fromisoformat(match.group(1))
    except ValueError:
        return None
    return get_entry(day)


def _find_typed(text: str) -> DailyLogEntry | None:
    """Only "log:YYYY-MM-DD": a bare date is not claimed, so it never shadows another kind."""
    if not text.strip().lower().startswith("log:"):
        return None
    entry = _find_by_reference(text)
    if entry is None:
        raise NotFound(f"No daily log entry {text.strip()[4:].strip()} (a day's entry exists once it is written).")
    return entry


links.register("daily_log", links.Resolver(
    "daily log entry", lambda entry_id: db.session.get(DailyLogEntry, entry_id),
    lambda entry: f"Log {entry.day.isoformat()}", lambda entry: f"/log/{entry.day.isoformat()}",
    _find_by_reference))
links.register_shorthand("daily_log", _find_typed)
