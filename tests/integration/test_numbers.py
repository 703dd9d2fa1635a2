"""Experiment numbers: sequential, continuing from SAGAN_FIRST_EXPERIMENT_NUMBER, and
safe when many creators race (SPEC §1)."""
from __future__ import annotations

import threading
import uuid

import sqlalchemy as sa

from models import Experiment, db
from services.core.actors import Actor
from services.workflow import experiments

OWNER = Actor("owner", None, "test owner")


def _numbers(app) -> list[int]:
    with app.app_context():
        return list(db.session.scalars(sa.select(Experiment.number).order_by(Experiment.number)))


def test_numbers_are_sequential_from_one_by_default(app, make_experiment):
    """Do the first experiments get #1, #2, #3?"""
    assert [make_experiment(f"Exp {i}") for i in range(3)] == [1, 2, 3]


def test_numbers_continue_from_the_configured_first_number(app, make_experiment, monkeypatch):
    """With SAGAN_FIRST_EXPERIMENT_NUMBER=366, do numbers go 366, 367, 368 (after the old #365)?"""
    monkeypatch.setitem(app.config, "SAGAN_FIRST_EXPERIMENT_NUMBER", 366)
    assert [make_experiment(f"Exp {i}") for i in range(3)] == [366, 367, 368]


def test_first_number_takes_effect_on_an_existing_counter(app, make_experiment, monkeypatch):
    """Raising the first number after some experiments exist jumps ahead, never back."""
    assert make_experiment("Before the move") == 1
    monkeypatch.setitem(app.config, "SAGAN_FIRST_EXPERIMENT_NUMBER", 366)
    assert make_experiment("After the move") == 366
    monkeypatch.setitem(app.config, "SAGAN_FIRST_EXPERIMENT_NUMBER", 1)
    assert make_experiment("Lowered again") == 367


def test_new_number_follows_an_imported_higher_number(app, make_experiment):
    """When a higher number already exists (an import), does the counter start after it?"""
    with app.app_context():
        db.session.execute(sa.insert(Experiment).values(
            id=uuid.uuid4(), number=500, title="Imported", status="completed",
            kind="experiment", priority="normal", assignee_kind="agent", pod_account="local",
            tags=[], has_clean_result=False, auto_approve_plan=False,
            created_at=sa.func.now(), updated_at=sa.func.now()))
        db.session.commit()
    assert make_experiment("After the import") == 501


def _create_concurrently(app, count: int) -> tuple[list[int], list[BaseException]]:
    barrier = threading.Barrier(count)
    numbers: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        try:
            with app.app_context():
                barrier.wait(timeout=10)
                experiment = experiments.create_experiment({"title": f"Racer {i}"}, OWNER)
                db.session.commit()
                with lock:
                    numbers.append(experiment.number)
                db.session.remove()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return numbers, errors


def test_concurrent_creators_get_distinct_consecutive_numbers(app):
    """Do 8 threads creating experiments at once (fresh counter) get #1..#8, no gaps or repeats?"""
    numbers, errors = _create_concurrently(app, 8)
    assert errors == []
    assert sorted(numbers) == list(range(1, 9))
    assert _numbers(app) == list(range(1, 9))


def test_concurrent_creators_continue_an_existing_counter(app, make_experiment, monkeypatch):
    """With the counter already at 366, do 8 racing creators get #367..#374?"""
    monkeypatch.setitem(app.config, "SAGAN_FIRST_EXPERIMENT_NUMBER", 366)
    assert make_experiment("First") == 366
    numbers, errors = _create_concurrently(app, 8)
    assert errors == []
    assert sorted(numbers) == list(range(367, 375))
