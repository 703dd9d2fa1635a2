"""The experiment page's poll, for a running experiment whose pods post: progress waits a little.

Every progress post moves the page's version (the pod's row and a `progress` event in the
timeline), so with ten pods posting every 10 s nearly every 5 s poll rendered every panel
afresh — 36 statements and about 80 ms of CPU each (docs/performance.md). Here each page
this process renders is remembered by its version: the fingerprint's steady part (all but
what progress moves), the pods' statuses and when. A later poll holding that version whose
steady part is unchanged, less than LIVE_PROGRESS_SECONDS after the render, with no
timeline event but progress and no pod's status changed since, gets a 304 with its own
version: the progress bars and the timeline's progress row are at most that many seconds
behind; any other change is rendered at once, as before.

Per process, like the board's card cache: a poll that reaches another web process (or a
page from before a restart) just renders. At most MAX_PAGES versions are remembered.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from flask import current_app

from services.core.clock import utcnow
from services.workflow import experiments

MAX_PAGES = 2_000


@dataclass(frozen=True)
class RenderedPage:
    steady: str
    pod_statuses: frozenset
    rendered_at: object  # the database clock's time, for comparing with events' stamps
    monotonic: float


_pages: OrderedDict[tuple[int, str], RenderedPage] = OrderedDict()


def rendered(number: int, make_context: Callable[[], dict], render: Callable[[dict], str]) -> str:
    """Render the page (or its live panels), remembering its version. The time is taken
    before the context is read, so an event the render missed is newer than it."""
    started_at, started = utcnow(), time.monotonic()
    context = make_context()
    html = render(context)
    statuses = frozenset((str(card.pod.id), card.pod.status) for card in context.get("pod_cards") or ())
    _pages[(number, context["page_version"])] = RenderedPage(context["page_steady"], statuses, started_at, started)
    _pages.move_to_end((number, context["page_version"]))
    while len(_pages) > MAX_PAGES:
        _pages.popitem(last=False)
    return html


def held_version(number: int, if_none_match, current: experiments.PageVersion) -> str | None:
    """The version a poll keeps (answered 304) though `current` moved, or None to render."""
    wait = current_app.config["LIVE_PROGRESS_SECONDS"]
    asked = if_none_match.as_set() if if_none_match else set()
    if wait <= 0 or len(asked) != 1:
        return None
    version = next(iter(asked))
    page = _pages.get((number, version))
    if page is None or version == current.version or page.steady != current.steady:
        return None
    if time.monotonic() - page.monotonic >= wait:
        return None
    if experiments.changed_besides_progress(number, page.rendered_at, page.pod_statuses):
        return None
    return version


def forget() -> None:
    """Tests: start from nothing remembered."""
    _pages.clear()
