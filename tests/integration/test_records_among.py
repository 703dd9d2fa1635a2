"""records.among: `column IN ids` as one array parameter on PostgreSQL."""
from __future__ import annotations

import uuid

import sqlalchemy as sa

from models import Experiment, db
from services import experiments, records
from services.actors import Actor


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
