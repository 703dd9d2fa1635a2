"""Scalar metrics that pods post (loss, accuracy per step), one summary row per series, and
the points themselves stored a batch's series at a time.

A pod's batch (`metric_batches`, keyed by pod and seq) is stored once: a retried batch finds
its row and stores nothing. `metric_series` keeps one row per pod and metric name — a
`bigint` id, point count, step range, latest value, min and max — written with each batch,
so the page, the board and the compare view never read the points to list them.

The points of one batch for one series are one `metric_chunks` row: its steps, values and
wall times as arrays in the batch's order (PostgreSQL arrays; JSON lists on SQLite). A
point whose value was not finite (NaN, ±Infinity, beyond ±1e300) has a NULL value. A batch
of 1,000 points of 10 metrics is 10 rows, not 1,000: storing a batch costs a few index
entries instead of two per point, and a chart reads a series as its chunks.
"""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Mapped, mapped_column

from models import db

NAME_MAX = 120

# PostgreSQL arrays (the chart query unnests them); JSON lists on SQLite, read in Python.
STEPS_TYPE = sa.JSON().with_variant(ARRAY(sa.BigInteger()), "postgresql")
VALUES_TYPE = sa.JSON(none_as_null=True).with_variant(ARRAY(sa.Float()), "postgresql")
# A bigint on PostgreSQL; SQLite numbers only an INTEGER PRIMARY KEY by itself.
SERIES_ID_TYPE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class MetricBatch(db.Model):
    """One stored batch: what makes a retried (pod, seq) count once."""
    __tablename__ = "metric_batches"

    pod_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("pods.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(sa.BigInteger, primary_key=True)
    points: Mapped[int] = mapped_column(sa.Integer)
    created_at: Mapped[datetime]


class MetricSeries(db.Model):
    __tablename__ = "metric_series"
    __table_args__ = (sa.UniqueConstraint("pod_id", "name"),
                      sa.Index("ix_metric_series_experiment", "experiment_id", "name"))

    id: Mapped[int] = mapped_column(SERIES_ID_TYPE, primary_key=True, autoincrement=True)
    pod_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("pods.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(NAME_MAX))
    experiment_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("experiments.id", ondelete="CASCADE"))
    points: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    first_step: Mapped[int] = mapped_column(sa.BigInteger)
    last_step: Mapped[int] = mapped_column(sa.BigInteger)
    # The value at last_step, NULL when that point is not finite (NaN, ±Infinity, out of
    # range); the range of the finite points, NULL while there are none.
    last_value: Mapped[float | None] = mapped_column(sa.Float)
    min_value: Mapped[float | None] = mapped_column(sa.Float)
    max_value: Mapped[float | None] = mapped_column(sa.Float)
    updated_at: Mapped[datetime]


class MetricChunk(db.Model):
    """One batch's points of one series, in the batch's order."""
    __tablename__ = "metric_chunks"

    series_id: Mapped[int] = mapped_column(SERIES_ID_TYPE, sa.ForeignKey("metric_series.id", ondelete="CASCADE"),
                                           primary_key=True)
    seq: Mapped[int] = mapped_column(sa.BigInteger, primary_key=True)
    steps: Mapped[list] = mapped_column(STEPS_TYPE)
    point_values: Mapped[list] = mapped_column(VALUES_TYPE)
    # Seconds since the epoch as the pod saw them, NULL where a point had none; the whole
    # column NULL when no point of the chunk had one.
    wall_times: Mapped[list | None] = mapped_column(VALUES_TYPE, nullable=True)
