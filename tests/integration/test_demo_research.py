"""The demo's research record: `make run DEMO=1` and `make demo` show a project with research
questions, beliefs in several states with the demo experiments as their evidence, and a
published narrative."""
from __future__ import annotations

import sqlalchemy as sa

from models import Experiment, db
from models.literature import LiteratureItem
from models.research import Belief, BeliefVersion, ProjectNarrative, RecordLink
from services.pipeline import demo, demo_research


def test_the_demo_loads_a_project_whose_beliefs_rest_on_its_experiments(app, client, owner):
    """After the curated demo, is there one project holding the demo experiments, beliefs in
    at least four states whose changes cite an experiment, links from experiments to them,
    and a published narrative with a newer draft — and does a second load add nothing?"""
    with app.app_context():
        demo.load_curated()
        project = demo_research.research_project()
        assert project is not None
        beliefs = list(db.session.scalars(sa.select(Belief).where(Belief.project_id == project.id)))
        assert len({b.status for b in beliefs}) >= 4
        changed = [b for b in beliefs if b.version > 1]
        assert changed, "some beliefs have a history"
        for belief in changed:
            latest = db.session.scalar(sa.select(BeliefVersion).where(
                BeliefVersion.belief_id == belief.id, BeliefVersion.version == belief.version))
            assert latest.experiment_id is not None, belief.title
        tests = db.session.scalar(sa.select(sa.func.count(RecordLink.id)).where(RecordLink.kind == "tests"))
        assert tests >= len(beliefs)
        in_project = db.session.scalar(sa.select(sa.func.count(Experiment.id)).where(
            Experiment.project_id == project.id))
        assert in_project >= 10
        statuses = [n.status for n in db.session.scalars(sa.select(ProjectNarrative).where(
            ProjectNarrative.project_id == project.id).order_by(ProjectNarrative.version))]
        assert statuses == ["published", "draft"]
        papers = db.session.scalar(sa.select(sa.func.count(LiteratureItem.id)).where(
            LiteratureItem.project_id == project.id))
        assert papers >= 24
        counts = (len(beliefs), tests)
        demo.load_curated()
        assert db.session.scalar(sa.select(sa.func.count(Belief.id)).where(Belief.project_id == project.id)) \
            == counts[0]
    page = client.get(f"/p/{demo_research.PROJECT_SLUG}")
    assert page.status_code == 200
    assert "Established" in page.text and "Weight decay sets the grokking delay" in page.text
    assert "Small-scale proxies for large-scale Transformer training instabilities" in page.text  # unread first


def test_the_demo_journey_belongs_to_the_demo_project(app, owner):
    """Does `make demo`'s journey experiment, and the belief it tests, sit in the demo project?"""
    with app.app_context():
        demo.load_curated()
        number = demo.ensure_journey_experiment()
        project = demo_research.research_project()
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        assert experiment.project_id == project.id
        belief = db.session.scalar(sa.select(Belief).where(Belief.title == demo.DEMO_BELIEF_TITLE))
        assert belief.project_id == project.id
