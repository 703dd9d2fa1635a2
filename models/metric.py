"""Scalar metrics that pods post (loss, accuracy per step), and one summary row per series.

A point's key is (pod, seq, position): the batch it came in and its place there, so a
retried batch (the same pod and seq) is stored once. `metric_series` keeps one row per pod
and metric name — point count, step range, latest value, min and max — written with each
batch, so the page, the board and the compare view never scan the points to list them.
"""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import db

NAME_MAX = 120


class MetricPoint(db.Model):
    __tablename__ = "metric_points"
    __table_args__ = (
        # The chart query: one experiment's metric, every pod, in step order. `value` rides
        # along in the index on PostgreSQL, so downsampling 100,000 points is an index-only scan.
        sa.Index("ix_metric_points_series", "experiment_id", "name", "pod_id", "step",
                 postgresql_include=["value"]),
    )

    pod_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("pods.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(sa.BigInteger, primary_key=True)
    position: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    experiment_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("experiments.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(NAME_MAX))
    step: Mapped[int] = mapped_column(sa.BigInteger)
    value: Mapped[float] = mapped_column(sa.Float)
    wall_time: Mapped[float | None] = mapped_column(sa.Float)  # seconds since the epoch, as the pod saw it


class MetricSeries(db.Model):
    __tablename__ = "metric_series"
    __table_args__ = (sa.Index("ix_metric_series_experiment", "experiment_id", "name"),)

    pod_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("pods.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(NAME_MAX), primary_key=True)
    experiment_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("experiments.id", ondelete="CASCADE"))
    points: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    first_step: Mapped[int] = mapped_column(sa.BigInteger)
    last_step: Mapped[int] = mapped_column(sa.BigInteger)
    last_value: Mapped[float] = mapped_column(sa.Float)  # the value at last_step
    min_value: Mapped[float] = mapped_column(sa.Float)
    max_value: Mapped[float] = mapped_column(sa.Float)
    updated_at: Mapped[datetime]
