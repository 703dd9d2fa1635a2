"""The daily log (SPEC §12.3): the newest entries, one day's entry with the days around it,
and writing a day on demand ("Write today so far", "Rewrite"). Views are thin;
services.day.daily_log does the work."""
from __future__ import annotations

from flask import Blueprint, redirect, render_template, request, url_for

from blueprints import access
from blueprints._actions import perform
from services.core.errors import NotFound, ValidationError
from services.day import daily_log

bp = Blueprint("daily_log", __name__)
PAGE_SIZE = 30


def _day_or_404(day_text: str):
    """A day in the URL that is not one (or has not begun) is a page that does not exist."""
    try:
        return daily_log.parse_day(day_text)
    except ValidationError as exc:
        raise NotFound(exc.message)


@bp.get("/log")
@access.owner
def index():
    """The newest entries; `?day=` (the date picker without JavaScript) goes to that day."""
    picked = request.args.get("day")
    if picked:
        return redirect(url_for("daily_log.day", day_text=_day_or_404(picked).isoformat()), code=303)
    return render_template("daily_log/index.html", entries=daily_log.newest(PAGE_SIZE), today=daily_log.today())


@bp.get("/log/<day_text>")
@access.owner
def day(day_text: str):
    """One day's entry, with the previous and next days and the links panel."""
    page = daily_log.day_page(_day_or_404(day_text))
    return render_template("daily_log/day.html", page=page, today=daily_log.today())


@bp.post("/log/<day_text>/write")
@access.owner
def write(day_text: str):
    """Write the day's entry from the record now (today so far, or a past day again)."""
    day = _day_or_404(day_text)
    return perform(lambda: daily_log.write(day, "owner"),
                   done=lambda: redirect(url_for("daily_log.day", day_text=day.isoformat()), code=303),
                   keyed=False)
