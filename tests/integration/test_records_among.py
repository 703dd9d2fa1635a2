"""records.among: `column IN ids` as one array parameter on PostgreSQL."""
from __future__ import annotations

import uuid

import sqlalchemy as sa

from models import Experiment, db
from services.core import records
from services.core.actors import Actor
from services.workflow import experiments


def test_among_finds_exactly_the_given_ids_with_one_parameter(app):
    with app.app_context():
        made = [experiments.create_experiment({"title": f"Among {i}"}, Actor("owner")) for i in range(5)]
        db.session.flush()
        wanted = [made[0].id, made[3].id, uuid.uuid4()]  # an id of no row is simply not found
        condition = records.among(Experiment.id, wanted)
        found = set(db.session.scalars(sa.select(Experiment.id).where(condition)))
        assert found == {made[0].id, made[3].id}
        # One bind parameter however many ids (the board passes hundreds).
        assert len(sa.select(Experiment.id).where(condition).compile(db.engine).params) == 1
        assert not db.session.scalars(sa.select(Experiment.id).where(records.among(Experiment.id, []))).all()
        db.session.rollback()


def test_among_takes_values_other_than_uuids_as_a_typed_array(app):
    """Text needs quoting inside an array literal, so only UUIDs go as one literal; other
    values (a comma, a brace, a quote in a title) go as a typed array parameter."""
    with app.app_context():
        titles = ['Among, with a comma', 'Among {braced}', 'Among "quoted"']
        for title in titles:
            experiments.create_experiment({"title": title}, Actor("owner"))
        db.session.flush()
        found = set(db.session.scalars(sa.select(Experiment.title).where(
            records.among(Experiment.title, titles[:2] + ["no such title"]))))
        assert found == set(titles[:2])
        db.session.rollback()
