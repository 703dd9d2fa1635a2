"""A panel of the experiment page is declared once (blueprints/experiment_panels.py): its
context, its template and the tables it shows. The live poll's fingerprint is built from those
declarations, so a panel added by one declaration and one template refreshes on the open page
when its table changes — and the declaration is what makes it."""
from __future__ import annotations

import re

import jinja2
import pytest
import sqlalchemy as sa

from blueprints import experiment_panels
from blueprints.experiment_panels import Panel
from models import PromotedResult, db
from services.core import clock
from services.workflow import experiments
from services.workflow.experiments import PageWatch

TEMPLATE = ('<section class="panel" id="promoted-copies"><h2>Promoted copies</h2>'
            '<p id="copy-count">{{ promoted_copies }} promoted</p></section>')


@pytest.fixture
def panel_template(app):
    """The new panel's one template, beside the app's own."""
    original = app.jinja_env.loader
    app.jinja_env.loader = jinja2.ChoiceLoader([jinja2.DictLoader({"test/_promoted.html": TEMPLATE}), original])
    yield "test/_promoted.html"
    app.jinja_env.loader = original


def _copies(experiment) -> dict:
    count = db.session.scalar(sa.select(sa.func.count(PromotedResult.id))
                              .where(PromotedResult.experiment_id == experiment.id))
    return {"promoted_copies": count}


def _declare(watch: bool, template: str):
    watches = (PageWatch(PromotedResult.updated_at, lambda e: PromotedResult.experiment_id == e),) if watch else ()
    experiment_panels.add(Panel("promoted-copies", watches, context=_copies, template=template))


def _add_copy(app, number: int) -> None:
    with app.app_context():
        experiment = experiments.get_experiment(number)
        db.session.add(PromotedResult(experiment_id=experiment.id, promoted_to="shared", promoted_at=clock.utcnow(),
                                      title="A finding", body="<p>Body</p>", figure_ids=[]))
        db.session.commit()


def _poll(client, number: int, version: str):
    return client.get(f"/experiments/{number}/live", headers={"If-None-Match": f'"{version}"', "HX-Request": "true"})


def _version(html: str) -> str:
    return re.search(r'id="experiment-live"[^>]*data-version="([0-9a-f]+)"', html).group(1)


@pytest.mark.parametrize("watch", [True, False], ids=["declared-table", "no-table-declared"])
def test_a_panel_declared_once_refreshes_when_its_table_changes(app, client, owner, make_experiment,
                                                                panel_template, watch):
    """One declaration and one template: is the panel on the page, does the poll stay 304 while
    nothing changed, and after a row of its table is added does the poll bring the panel back
    with the new count — and, declared without its table, does the poll never see the change?"""
    _declare(watch, panel_template)
    try:
        number = make_experiment("Panels", status="planning")
        page = client.get(f"/experiments/{number}").text
        assert '<p id="copy-count">0 promoted</p>' in page
        version = _version(page)
        assert _poll(client, number, version).status_code == 304
        _add_copy(app, number)
        answer = _poll(client, number, version)
        if watch:
            assert answer.status_code == 200 and '<p id="copy-count">1 promoted</p>' in answer.text
        else:
            assert answer.status_code == 304
    finally:
        experiment_panels.remove("promoted-copies")


def test_a_panel_cannot_be_declared_twice(app):
    """Is a second panel under a name already declared refused, rather than silently doubled?"""
    with pytest.raises(ValueError, match="already declared"):
        experiment_panels.add(Panel("pods"))


def test_the_fingerprint_reads_exactly_the_declared_tables(app_ctx):
    """Does the poll's fingerprint watch one part per declared table (plus the timeline), so the
    declarations are its only source?"""
    declared = [watch for panel in experiment_panels.PANELS for watch in panel.watches]
    assert len(experiments._page_parts(sa.literal(None))) == len(declared) + 1
