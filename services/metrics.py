"""Scalar metrics from pods: batch ingest, downsampled chart data, and the compare table.

A pod posts batches of up to 1,000 points — `{"seq": n, "points": [{"step", "name", "value",
"wall_time"?}, …]}` — with its own `spt_` token (POST /api/metrics). A batch is stored
whole or not at all, once per (pod, seq): a retry of a batch already stored answers ok and
writes nothing. With each batch, the series summary (`metric_series`: one row per pod and
metric name) is brought up to date, so listing an experiment's metrics, the compare table
and the "latest value" never read the points.

Charts never ship raw points past a few thousand: the database buckets each series by step
(min, max and mean per bucket, `DOWNSAMPLE_TARGET` buckets), so a series of 100,000 points
answers as 1,000 buckets, and the chart draws the mean line inside its min–max band.

A metric's unit, when it has one, is written in brackets at the end of its name:
`"val/accuracy [%]"`, `"step_time [s]"`.
"""
from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass

import sqlalchemy as sa

from models import Experiment, MetricPoint, MetricSeries, Pod, db
from models.metric import NAME_MAX
from services.clock import utcnow
from services.errors import TooLarge, ValidationError
from services.redact import redact

BATCH_MAX = 1_000
NAMES_PER_BATCH_MAX = 50
SEQ_LIMIT = 2**62
STEP_LIMIT = 2**62
DOWNSAMPLE_TARGET = 1_000
CHARTS_MAX = 24          # metric names drawn on one page
COMPARE_MAX = 12         # experiments side by side
POINT_FIELDS = {"step", "name", "value", "wall_time"}
_UNIT = re.compile(r"\s*\[([^\[\]]{1,16})\]\s*$")


@dataclass
class Batch:
    seq: int
    steps: list[int]
    names: list[str]
    values: list[float]
    wall_times: list[float | None]

    def __len__(self) -> int:
        return len(self.steps)


def _finite(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def parse_batch(data) -> Batch:
    """Validate a batch body; every problem is a clear 400 naming the point, nothing is kept."""
    if not isinstance(data, dict):
        raise ValidationError("The body must be a JSON object with seq and points.", code="invalid_json")
    unknown = set(data) - {"seq", "points"}
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(sorted(unknown))}.", field=sorted(unknown)[0])
    seq = data.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < SEQ_LIMIT:
        raise ValidationError("seq must be a non-negative whole number (it makes a retried batch count once).",
                              field="seq")
    points = data.get("points")
    if not isinstance(points, list) or not points:
        raise ValidationError("points must be a non-empty list of {step, name, value} objects.", field="points")
    if len(points) > BATCH_MAX:
        raise TooLarge(f"{len(points):,} points in one batch; the limit is {BATCH_MAX:,}: send several batches.")
    steps, names, values, wall_times = [], [], [], []
    for index, point in enumerate(points):
        if not isinstance(point, dict):
            raise ValidationError(f"points[{index}] must be an object.", field="points")
        if not point.keys() <= POINT_FIELDS:
            extra = sorted(set(point) - POINT_FIELDS)
            raise ValidationError(f"points[{index}] has unknown field(s): {', '.join(extra)}.", field="points")
        step, name, value, wall_time = point.get("step"), point.get("name"), point.get("value"), point.get("wall_time")
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < STEP_LIMIT:
            raise ValidationError(f"points[{index}].step must be a non-negative whole number.", field="points")
        if not isinstance(name, str) or not 1 <= len(name) <= NAME_MAX or not name.isprintable() \
                or not name.strip():
            raise ValidationError(f"points[{index}].name must be printable text of 1–{NAME_MAX} characters.",
                                  field="points")
        if not _finite(value):
            raise ValidationError(f"points[{index}].value must be a finite number (not NaN, inf or text).",
                                  field="points")
        if wall_time is not None and (not _finite(wall_time) or wall_time < 0):
            raise ValidationError(f"points[{index}].wall_time must be seconds since the epoch.", field="points")
        steps.append(step)
        names.append(name)
        values.append(float(value))
        wall_times.append(None if wall_time is None else float(wall_time))
    distinct = set(names)
    if len(distinct) > NAMES_PER_BATCH_MAX:
        raise ValidationError(f"{len(distinct)} metric names in one batch; the limit is {NAMES_PER_BATCH_MAX}.",
                              field="points")
    return Batch(seq, steps, _redacted(names, distinct), values, wall_times)


def _redacted(names: list[str], distinct: set[str]) -> list[str]:
    """Names are stored and shown, so they pass the redactor — once per distinct name."""
    cleaned = {name: (redact(name) or "")[:NAME_MAX] for name in distinct}
    return [cleaned[name] for name in names]


def _summaries(batch: Batch) -> dict[str, list]:
    """name → [points, first step, last step, value at last step, min, max] within the batch."""
    out: dict[str, list] = {}
    for step, name, value in zip(batch.steps, batch.names, batch.values):
        row = out.get(name)
        if row is None:
            out[name] = [1, step, step, value, value, value]
            continue
        row[0] += 1
        if step < row[1]:
            row[1] = step
        if step >= row[2]:
            row[2], row[3] = step, value
        if value < row[4]:
            row[4] = value
        if value > row[5]:
            row[5] = value
    return out


# The series summary merges a batch into what is stored: counts add, the range widens, and
# the latest value is the one at the highest step (batches may arrive out of order).
_MERGE_SERIES = """
  points = metric_series.points + excluded.points,
  first_step = CASE WHEN excluded.first_step < metric_series.first_step THEN excluded.first_step
                    ELSE metric_series.first_step END,
  last_value = CASE WHEN excluded.last_step >= metric_series.last_step THEN excluded.last_value
                    ELSE metric_series.last_value END,
  last_step = CASE WHEN excluded.last_step > metric_series.last_step THEN excluded.last_step
                   ELSE metric_series.last_step END,
  min_value = CASE WHEN excluded.min_value < metric_series.min_value THEN excluded.min_value
                   ELSE metric_series.min_value END,
  max_value = CASE WHEN excluded.max_value > metric_series.max_value THEN excluded.max_value
                   ELSE metric_series.max_value END,
  updated_at = excluded.updated_at
"""

# PostgreSQL stores a batch in one round trip: the points go in from arrays (unnest), and
# the summary rows are merged only when the points were new — a repeated (pod, seq) finds
# its rows there already and writes nothing at all. The arrays travel as array literals
# (`{1,2,3}`) built with str.join: psycopg adapting 1,000-element lists element by element
# cost more than the insert. Names go once each, points refer to them by index.
_PG_RECORD = sa.text(f"""
WITH names AS (
  SELECT name, ordinality AS idx FROM unnest(CAST(:distinct_names AS TEXT[])) WITH ORDINALITY AS n(name, ordinality)
), points AS (
  INSERT INTO metric_points (pod_id, seq, position, experiment_id, name, step, value, wall_time)
  SELECT :pod_id, :seq, p.position - 1, :experiment_id, names.name, p.step, p.value, p.wall_time
  FROM unnest(CAST(:name_idx AS INTEGER[]), CAST(:steps AS BIGINT[]), CAST(:values AS DOUBLE PRECISION[]),
              CAST(:wall_times AS DOUBLE PRECISION[])) WITH ORDINALITY AS p(name_idx, step, value, wall_time, position)
  JOIN names ON names.idx = p.name_idx
  WHERE NOT EXISTS (SELECT 1 FROM metric_points WHERE pod_id = :pod_id AND seq = :seq)
  ON CONFLICT DO NOTHING
  RETURNING 1
), stored AS (SELECT count(*) AS n FROM points), series AS (
  INSERT INTO metric_series AS metric_series (pod_id, name, experiment_id, points, first_step, last_step,
                                              last_value, min_value, max_value, updated_at)
  SELECT :pod_id, names.name, :experiment_id, s.points, s.first_step, s.last_step, s.last_value, s.min_value,
         s.max_value, :now
  FROM unnest(CAST(:s_points AS BIGINT[]), CAST(:s_first AS BIGINT[]), CAST(:s_last AS BIGINT[]),
              CAST(:s_last_value AS DOUBLE PRECISION[]), CAST(:s_min AS DOUBLE PRECISION[]),
              CAST(:s_max AS DOUBLE PRECISION[])) WITH ORDINALITY
       AS s(points, first_step, last_step, last_value, min_value, max_value, idx)
  JOIN names ON names.idx = s.idx
  WHERE (SELECT n FROM stored) > 0
  ON CONFLICT (pod_id, name) DO UPDATE SET {_MERGE_SERIES}
)
SELECT n FROM stored
""")


def _array(values) -> str:
    """A PostgreSQL array literal of numbers (None as NULL); repr keeps every float exact."""
    return "{" + ",".join("NULL" if v is None else repr(v) for v in values) + "}"


def record_batch(pod: Pod, batch: Batch) -> bool:
    """Store one batch for `pod`; True when stored, False for a (pod, seq) already stored."""
    summaries = _summaries(batch)
    if db.engine.dialect.name == "postgresql":
        index = {name: i for i, name in enumerate(summaries, start=1)}
        rows = list(summaries.values())
        stored = db.session.execute(_PG_RECORD, {
            "pod_id": pod.id, "seq": batch.seq, "experiment_id": pod.experiment_id, "now": utcnow(),
            "distinct_names": list(summaries), "name_idx": _array([index[n] for n in batch.names]),
            "steps": _array(batch.steps), "values": _array(batch.values),
            "wall_times": _array(batch.wall_times),
            "s_points": _array([r[0] for r in rows]), "s_first": _array([r[1] for r in rows]),
            "s_last": _array([r[2] for r in rows]), "s_last_value": _array([r[3] for r in rows]),
            "s_min": _array([r[4] for r in rows]), "s_max": _array([r[5] for r in rows]),
        }).scalar()
        return bool(stored)
    return _record_portable(pod, batch, summaries)


def _record_portable(pod: Pod, batch: Batch, summaries: dict[str, list]) -> bool:
    """The same writes statement by statement (SQLite, the embedded default)."""
    seen = db.session.scalar(sa.select(sa.literal(1)).where(MetricPoint.pod_id == pod.id,
                                                            MetricPoint.seq == batch.seq).limit(1))
    if seen:
        return False
    db.session.execute(sa.insert(MetricPoint), [
        {"pod_id": pod.id, "seq": batch.seq, "position": i, "experiment_id": pod.experiment_id, "name": name,
         "step": step, "value": value, "wall_time": wall_time}
        for i, (step, name, value, wall_time) in enumerate(zip(batch.steps, batch.names, batch.values,
                                                               batch.wall_times))])
    now = utcnow()
    table = MetricSeries.__table__
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert
    for name, (count, first, last, last_value, low, high) in summaries.items():
        stmt = sqlite_insert(table).values(pod_id=pod.id, name=name, experiment_id=pod.experiment_id, points=count,
                                           first_step=first, last_step=last, last_value=last_value,
                                           min_value=low, max_value=high, updated_at=now)
        db.session.execute(stmt.on_conflict_do_update(index_elements=["pod_id", "name"], set_={
            "points": table.c.points + stmt.excluded.points,
            "first_step": sa.func.min(table.c.first_step, stmt.excluded.first_step),
            "last_value": sa.case((stmt.excluded.last_step >= table.c.last_step, stmt.excluded.last_value),
                                  else_=table.c.last_value),
            "last_step": sa.func.max(table.c.last_step, stmt.excluded.last_step),
            "min_value": sa.func.min(table.c.min_value, stmt.excluded.min_value),
            "max_value": sa.func.max(table.c.max_value, stmt.excluded.max_value),
            "updated_at": now}))
    return True


# --- reading ---------------------------------------------------------------------------------

def unit_of(name: str) -> str | None:
    """The unit written in brackets at the end of a metric name, if any."""
    found = _UNIT.search(name)
    return found.group(1).strip() if found else None


def label_of(name: str) -> str:
    """The metric name without its bracketed unit."""
    return _UNIT.sub("", name) or name


def pod_label(run_index: int, attempt: int | None) -> str:
    """How a chart names a pod's line: its run (a seed, usually) and the attempt if retried."""
    label = f"run {run_index}"
    return label if (attempt or 1) == 1 else f"{label} (attempt {attempt})"


@dataclass
class MetricSummary:
    name: str
    label: str
    unit: str | None
    pods: int
    points: int
    last_value: float       # mean over pods of each pod's latest value
    last_min: float         # the spread of those latest values across pods
    last_max: float
    min_value: float
    max_value: float
    last_step: int


def summaries_for(experiment_ids) -> dict[uuid.UUID, dict[str, MetricSummary]]:
    """experiment id → metric name → summary, for many experiments in one query."""
    ids = list(experiment_ids)
    if not ids:
        return {}
    rows = db.session.execute(
        sa.select(MetricSeries.experiment_id, MetricSeries.name, sa.func.count(), sa.func.sum(MetricSeries.points),
                  sa.func.avg(MetricSeries.last_value), sa.func.min(MetricSeries.last_value),
                  sa.func.max(MetricSeries.last_value), sa.func.min(MetricSeries.min_value),
                  sa.func.max(MetricSeries.max_value), sa.func.max(MetricSeries.last_step))
        .where(MetricSeries.experiment_id.in_(ids))
        .group_by(MetricSeries.experiment_id, MetricSeries.name)
        .order_by(MetricSeries.experiment_id, MetricSeries.name))
    out: dict[uuid.UUID, dict[str, MetricSummary]] = {}
    for experiment_id, name, pods, points, last, last_min, last_max, low, high, last_step in rows:
        out.setdefault(experiment_id, {})[name] = MetricSummary(
            name, label_of(name), unit_of(name), pods, int(points or 0), float(last), float(last_min),
            float(last_max), float(low), float(high), int(last_step))
    return out


def page_context(experiment: Experiment) -> dict:
    """What templates/experiments/_metrics.html needs: the metric names (charts load their data)."""
    found = summaries_for([experiment.id]).get(experiment.id, {})
    names = list(found.values())
    return {"metric_summaries": names[:CHARTS_MAX], "metric_names_hidden": max(0, len(names) - CHARTS_MAX)}


# One pass over the series' index, no sort: buckets of `width` steps from `lo`, every pod
# on the same grid (so overlaid runs line up), hashed by the database; the ~1,000 rows a
# series comes back as are put in order here. Width 1 is the raw points.
_DOWNSAMPLED = sa.text("""
SELECT pod_id, (step - :lo) / :width AS bucket, avg(value) AS mean, min(value) AS low, max(value) AS high,
       min(step) AS first_step, max(step) AS last_step
FROM metric_points
WHERE experiment_id = :experiment_id AND name = :name
GROUP BY pod_id, bucket
""").bindparams(sa.bindparam("experiment_id", type_=sa.Uuid())).columns(
    pod_id=sa.Uuid(), bucket=sa.BigInteger(), mean=sa.Float(), low=sa.Float(), high=sa.Float(),
    first_step=sa.BigInteger(), last_step=sa.BigInteger())


def chart_data(experiment: Experiment, name: str, target: int = DOWNSAMPLE_TARGET) -> dict:
    """One metric of one experiment, every pod a series, at most about `target` buckets a
    series: {"name", "label", "unit", "series": [{"label", "pod", "points", "downsampled",
    "x", "y", "min", "max"}]} — `y` is the bucket's mean, `min`/`max` its range (all three
    the point itself where nothing was merged), `x` the middle of the bucket's steps."""
    if not isinstance(name, str) or not 1 <= len(name) <= NAME_MAX:
        raise ValidationError("Name the metric: ?name=… (1–120 characters).", field="name")
    series = db.session.execute(
        sa.select(MetricSeries.pod_id, MetricSeries.points, MetricSeries.first_step, MetricSeries.last_step,
                  Pod.run_index, Pod.attempt, Pod.name)
        .join(Pod, Pod.id == MetricSeries.pod_id)
        .where(MetricSeries.experiment_id == experiment.id, MetricSeries.name == name)
        .order_by(Pod.run_index, Pod.attempt)).all()
    body = {"name": name, "label": label_of(name), "unit": unit_of(name), "series": []}
    if not series:
        return body
    lo, hi = min(row.first_step for row in series), max(row.last_step for row in series)
    width = 1 if max(row.points for row in series) <= target else -(-(hi - lo + 1) // target)
    buckets: dict = {row.pod_id: [] for row in series}
    for pod_id, bucket, mean, low, high, first, last in db.session.execute(
            _DOWNSAMPLED, {"experiment_id": experiment.id, "name": name, "lo": lo, "width": width}):
        buckets[pod_id].append((bucket, (first + last) / 2, float(mean), float(low), float(high)))
    for row in series:
        rows = sorted(buckets[row.pod_id])
        body["series"].append({
            "label": pod_label(row.run_index, row.attempt), "pod": row.name, "points": int(row.points),
            "downsampled": len(rows) < row.points, "x": [r[1] for r in rows], "y": [r[2] for r in rows],
            "min": [r[3] for r in rows], "max": [r[4] for r in rows]})
    return body


def series_version(experiment: Experiment, name) -> str | None:
    """A tag that changes whenever a point of this metric is stored (None: no such metric)."""
    if not isinstance(name, str):
        return None
    count, updated = db.session.execute(
        sa.select(sa.func.sum(MetricSeries.points), sa.func.max(MetricSeries.updated_at))
        .where(MetricSeries.experiment_id == experiment.id, MetricSeries.name == name)).one()
    return f"m{count}-{updated.timestamp():.6f}" if count else None


def experiments_to_compare(raw_numbers: list[str]) -> list[Experiment]:
    """The experiments named by `?e=12&e=15` (or `e=12,15`), in that order; bad input is a 400."""
    numbers: list[int] = []
    for raw in raw_numbers:
        for part in raw.replace(",", " ").split():
            text = part.strip().lstrip("#")
            if not text.isdigit() or int(text) >= 2**31:
                raise ValidationError(f"{part[:20]!r} is not an experiment number.", field="e")
            if int(text) not in numbers:
                numbers.append(int(text))
    if len(numbers) > COMPARE_MAX:
        raise ValidationError(f"{len(numbers)} experiments chosen; compare at most {COMPARE_MAX} at once.",
                              field="e")
    found = {e.number: e for e in db.session.scalars(sa.select(Experiment).where(Experiment.number.in_(numbers)))}
    missing = [n for n in numbers if n not in found]
    if missing:
        raise ValidationError(f"No experiment #{', #'.join(map(str, missing))}.", field="e")
    return [found[n] for n in numbers]


def compare(experiments: list[Experiment]) -> dict:
    """The compare view's table: one row per experiment, one column per metric name (the
    latest value, mean over pods), in the order the metrics first appear."""
    summaries = summaries_for(e.id for e in experiments)
    columns: list[str] = []
    for experiment in experiments:
        for name in summaries.get(experiment.id, {}):
            if name not in columns:
                columns.append(name)
    return {"metric_columns": [{"name": n, "label": label_of(n), "unit": unit_of(n)} for n in columns[:CHARTS_MAX]],
            "metric_cells": {e.id: summaries.get(e.id, {}) for e in experiments}}
