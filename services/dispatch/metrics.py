"""Scalar metrics from pods: batch ingest, downsampled chart data, and the compare table.

A pod posts batches of up to 1,000 points — `{"seq": n, "points": [{"step", "name", "value",
"wall_time"?}, …]}` — with its own `spt_` token (POST /api/metrics). A batch is stored
whole or not at all, once per (pod, seq): a retry of a batch already stored answers ok and
writes nothing (`metric_batches`). With each batch, the series summary (`metric_series`: one
row per pod and metric name, a bigint id) is brought up to date, so listing an experiment's
metrics, the compare table and the "latest value" never read the points; the points go in
as one `metric_chunks` row per metric of the batch (arrays of steps, values, wall times), so
a batch of 1,000 points of 10 metrics writes about a dozen rows (models/metric.py).

Charts never ship raw points past a few thousand: the database unnests a series' chunks and buckets them by step
(min, max and mean per bucket, `DOWNSAMPLE_TARGET` buckets), so a series of 100,000 points
answers as 1,000 buckets, and the chart draws the mean line inside its min–max band.

A value a chart cannot draw — NaN, ±Infinity (a diverged loss), or a number beyond
±VALUE_LIMIT — is not refused and not dropped: it is kept as a non-finite point, its value
NULL, so the chart marks where it happened and the summary says a run's latest value is
not finite. Every number stored is within ±VALUE_LIMIT, far enough from the largest double
that no sum or mean of them overflows (the database's own avg() is still kept to the
magnitudes it can sum: `_buckets`).

A metric's unit, when it has one, is written in brackets at the end of its name:
`"val/accuracy [%]"`, `"step_time [s]"`.
"""
from __future__ import annotations

import math
import re
import sys
import uuid
from dataclasses import dataclass

import sqlalchemy as sa

from models import Experiment, MetricBatch, MetricChunk, MetricSeries, Pod, db
from models.metric import NAME_MAX
from services.core.clock import utcnow
from services.core.errors import TooLarge, ValidationError
from services.core.redact import redact
from services.dispatch import run_config
from services.dispatch import tokens as pod_tokens

BATCH_MAX = 1_000
NAMES_PER_BATCH_MAX = 50
SEQ_LIMIT = 2**62
STEP_LIMIT = 2**62
DOWNSAMPLE_TARGET = 1_000
CHARTS_MAX = 24          # metric names drawn on one page
COMPARE_MAX = 12         # experiments side by side
POINT_FIELDS = {"step", "name", "value", "wall_time"}
FLOAT_MAX = sys.float_info.max
# The largest magnitude a point keeps as a number; beyond it a value is stored as non-finite.
# 1e300 leaves room below the largest double (1.8e308) for the sums of a mean and for the
# chart's own arithmetic (its axis padding overflowed to Infinity near the largest double).
VALUE_LIMIT = 1e300
# PostgreSQL's avg(double precision) also sums the squares of the deviations, which
# overflows — and fails the whole query — once values pass about 1e154; series within
# this magnitude are averaged as doubles, larger ones as numeric (exact, slower).
FLOAT_AVG_SAFE = 1e100
_UNIT = re.compile(r"\s*\[([^\[\]]{1,16})\]\s*$")


@dataclass
class Batch:
    seq: int
    steps: list[int]
    names: list[str]
    values: list[float | None]  # None: a non-finite point (NaN, ±Infinity, beyond ±VALUE_LIMIT)
    wall_times: list[float | None]
    non_finite: int = 0

    def __len__(self) -> int:
        return len(self.steps)


class NotANumber(ValueError):
    """A metric value that is not a number at all (text, a bool, null, an object)."""


def metric_number(value) -> float | None:
    """A posted metric value as stored: a float within ±VALUE_LIMIT, or None for a number a
    chart cannot draw — NaN and ±Infinity (Python's JSON reader accepts those literals, and
    1e999 reads as Infinity) and anything beyond the limit, integers of any size included.
    NotANumber for anything that is not a number (a bool is not one)."""
    kind = type(value)
    if kind is not float and kind is not int:
        raise NotANumber(value)
    # NaN fails both comparisons; Python compares a huge int with the float limit exactly.
    if -VALUE_LIMIT <= value <= VALUE_LIMIT:
        return float(value)
    return None


def _finite(value) -> bool:
    """A JSON number a float can hold: not a bool, NaN or infinity, and no integer so large
    that converting it would overflow (10**400 is valid JSON)."""
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    return kind is int and -FLOAT_MAX <= value <= FLOAT_MAX


def parse_batch(data) -> Batch:
    """Validate a batch body; every problem is a clear 400 naming the point, nothing is kept.

    The hot loop of metric ingest (1,000 points a request): exact type checks (`type(x) is
    int` also refuses a bool), and each distinct name checked once."""
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
    non_finite = 0
    good_names: set[str] = set()
    for index, point in enumerate(points):
        if type(point) is not dict:
            raise ValidationError(f"points[{index}] must be an object.", field="points")
        if not point.keys() <= POINT_FIELDS:
            extra = sorted(set(point) - POINT_FIELDS)
            raise ValidationError(f"points[{index}] has unknown field(s): {', '.join(extra)}.", field="points")
        step = point.get("step")
        if type(step) is not int or not 0 <= step < STEP_LIMIT:
            raise ValidationError(f"points[{index}].step must be a non-negative whole number.", field="points")
        name = point.get("name")
        if name not in good_names:
            if not isinstance(name, str) or not 1 <= len(name) <= NAME_MAX or not name.isprintable() \
                    or not name.strip():
                raise ValidationError(f"points[{index}].name must be printable text of 1–{NAME_MAX} characters.",
                                      field="points")
            good_names.add(name)
        value = point.get("value")
        # The common case inline (this loop runs 1,000 times a request), metric_number's rule.
        if not (type(value) is float and -VALUE_LIMIT <= value <= VALUE_LIMIT):
            try:
                value = metric_number(value)
            except NotANumber:
                raise ValidationError(f"points[{index}].value must be a number (NaN and Infinity are kept as "
                                      "non-finite points; text, true/false and null are not numbers).",
                                      field="points") from None
            non_finite += value is None
        wall_time = point.get("wall_time")
        if wall_time is not None:
            if not _finite(wall_time) or wall_time < 0:
                raise ValidationError(f"points[{index}].wall_time must be seconds since the epoch.",
                                      field="points")
            wall_time = float(wall_time)
        steps.append(step)
        names.append(name)
        values.append(value)
        wall_times.append(wall_time)
    if len(good_names) > NAMES_PER_BATCH_MAX:
        raise ValidationError(f"{len(good_names)} metric names in one batch; the limit is {NAMES_PER_BATCH_MAX}.",
                              field="points")
    return Batch(seq, steps, _redacted(names, good_names), values, wall_times, non_finite)


def _redacted(names: list[str], distinct: set[str]) -> list[str]:
    """Names are stored and shown, so they pass the redactor: all distinct names in one call
    (each call reads the environment's secrets anew), one by one only if a pattern spanned
    two of them. Names are printable, so none holds the newline that joins them."""
    ordered = sorted(distinct)
    joined = (redact("\n".join(ordered)) or "").split("\n")
    if len(joined) != len(ordered):
        joined = [redact(name) or "" for name in ordered]
    cleaned = {name: clean[:NAME_MAX] for name, clean in zip(ordered, joined)}
    if all(name == clean for name, clean in cleaned.items()):
        return names
    return [cleaned[name] for name in names]


@dataclass
class Chunk:
    """One batch's points of one metric name, in the batch's order, and their summary."""
    name: str
    steps: list[int]
    values: list[float | None]
    wall_times: list[float | None]
    first_step: int = 0
    last_step: int = 0
    # The value at the highest step (the later point on a tie); None when that point is
    # non-finite. The range is the finite points' (None when there are none).
    last_value: float | None = None
    min_value: float | None = None
    max_value: float | None = None

    def summarize(self) -> "Chunk":
        self.first_step = min(self.steps)
        # max() keeps the first of equal steps; the summary wants the later point's value.
        last = max(range(len(self.steps) - 1, -1, -1), key=self.steps.__getitem__)
        self.last_step, self.last_value = self.steps[last], self.values[last]
        finite = self.values
        if None in finite:
            finite = [v for v in finite if v is not None]
        if finite:
            self.min_value, self.max_value = min(finite), max(finite)
        return self


def chunks_of(batch: Batch) -> list[Chunk]:
    """The batch split by metric name, sorted by name: every writer of a pod's series rows
    takes their locks in the same order (two batches of one pod at once cannot deadlock)."""
    by_name: dict[str, Chunk] = {}
    for step, name, value, wall_time in zip(batch.steps, batch.names, batch.values, batch.wall_times):
        chunk = by_name.get(name)
        if chunk is None:
            chunk = by_name[name] = Chunk(name, [], [], [])
        chunk.steps.append(step)
        chunk.values.append(value)
        chunk.wall_times.append(wall_time)
    return [by_name[name].summarize() for name in sorted(by_name)]


# The series summary merges a batch into what is stored: counts add, the range widens, and
# the latest value is the one at the highest step (batches may arrive out of order). The
# range is of finite points only: NULL where a side has none, which LEAST and GREATEST skip.
_MERGE_SERIES = """
  points = metric_series.points + excluded.points,
  first_step = CASE WHEN excluded.first_step < metric_series.first_step THEN excluded.first_step
                    ELSE metric_series.first_step END,
  last_value = CASE WHEN excluded.last_step >= metric_series.last_step THEN excluded.last_value
                    ELSE metric_series.last_value END,
  last_step = CASE WHEN excluded.last_step > metric_series.last_step THEN excluded.last_step
                   ELSE metric_series.last_step END,
  min_value = LEAST(excluded.min_value, metric_series.min_value),
  max_value = GREATEST(excluded.max_value, metric_series.max_value),
  updated_at = excluded.updated_at
"""

# PostgreSQL stores a batch in one statement, in autocommit on the ingest path. The batch
# row goes in first and gates the rest: a repeated (pod, seq) finds its row there already
# and writes nothing at all. Then each metric's summary row is merged (RETURNING its id) and
# each metric's points go in as one chunk row of arrays. `pod_row` is the pod: found by
# its token's digest on the ingest path (an unknown or expired token finds none, so nothing
# is written), or by id for callers that hold the pod. Every array travels as a literal
# (`{1,2,3}`) built with str.join — psycopg adapting 1,000-element lists element by element
# cost more than the insert — and each chunk's arrays as one element of a text array.
_PG_RECORD_TEMPLATE = f"""
WITH pod_row AS ({{pod_row}}), batch AS (
  INSERT INTO metric_batches (pod_id, seq, points, created_at)
  SELECT id, :seq, :points, :now FROM pod_row
  ON CONFLICT DO NOTHING
  RETURNING pod_id
), chunk AS (
  SELECT c.name, c.points, c.first_step, c.last_step, c.last_value, c.min_value, c.max_value,
         CAST(c.steps AS BIGINT[]) AS steps, CAST(c.point_values AS DOUBLE PRECISION[]) AS point_values,
         CAST(c.wall_times AS DOUBLE PRECISION[]) AS wall_times
  FROM unnest(CAST(:names AS TEXT[]), CAST(:c_points AS BIGINT[]), CAST(:c_first AS BIGINT[]),
              CAST(:c_last AS BIGINT[]), CAST(:c_last_value AS DOUBLE PRECISION[]),
              CAST(:c_min AS DOUBLE PRECISION[]), CAST(:c_max AS DOUBLE PRECISION[]),
              CAST(:c_steps AS TEXT[]), CAST(:c_values AS TEXT[]), CAST(:c_wall_times AS TEXT[]))
       AS c(name, points, first_step, last_step, last_value, min_value, max_value, steps, point_values, wall_times)
), series AS (
  INSERT INTO metric_series AS metric_series (pod_id, name, experiment_id, points, first_step, last_step,
                                              last_value, min_value, max_value, updated_at)
  SELECT batch.pod_id, chunk.name, pod_row.experiment_id, chunk.points, chunk.first_step, chunk.last_step,
         chunk.last_value, chunk.min_value, chunk.max_value, :now
  FROM batch, pod_row, chunk
  ON CONFLICT (pod_id, name) DO UPDATE SET {_MERGE_SERIES}
  RETURNING id, name
), chunks AS (
  INSERT INTO metric_chunks (series_id, seq, steps, point_values, wall_times)
  SELECT series.id, :seq, chunk.steps, chunk.point_values, chunk.wall_times
  FROM series JOIN chunk ON chunk.name = series.name
)
SELECT (SELECT id FROM pod_row) AS pod_id, (SELECT count(*) FROM batch) AS stored
"""
_PG_RECORD_BY_TOKEN = sa.text(_PG_RECORD_TEMPLATE.format(pod_row=pod_tokens.VALID_POD_SQL))
_PG_RECORD_BY_POD = sa.text(_PG_RECORD_TEMPLATE.format(
    pod_row="SELECT id, experiment_id FROM pods WHERE id = :pod_id"))


def _array(values) -> str:
    """A PostgreSQL array literal of numbers (None as NULL); repr keeps every float exact."""
    return "{" + ",".join("NULL" if v is None else repr(v) for v in values) + "}"


def _arrays(arrays) -> str:
    """A text array whose elements are number-array literals (an element None as NULL)."""
    return "{" + ",".join("NULL" if a is None else f'"{_array(a)}"' for a in arrays) + "}"


def _pg_params(batch: Batch, now) -> dict:
    chunks = chunks_of(batch)
    return {
        "seq": batch.seq, "points": len(batch), "now": now, "names": [c.name for c in chunks],
        "c_points": _array([len(c.steps) for c in chunks]), "c_first": _array([c.first_step for c in chunks]),
        "c_last": _array([c.last_step for c in chunks]), "c_last_value": _array([c.last_value for c in chunks]),
        "c_min": _array([c.min_value for c in chunks]), "c_max": _array([c.max_value for c in chunks]),
        "c_steps": _arrays([c.steps for c in chunks]), "c_values": _arrays([c.values for c in chunks]),
        "c_wall_times": _arrays([None if all(w is None for w in c.wall_times) else c.wall_times
                                 for c in chunks]),
    }


def record_batch(pod: Pod, batch: Batch) -> bool:
    """Store one batch for `pod` in the session's transaction; True when stored, False for
    a (pod, seq) already stored."""
    if db.engine.dialect.name == "postgresql":
        row = db.session.execute(_PG_RECORD_BY_POD, {**_pg_params(batch, utcnow()), "pod_id": pod.id}).one()
        return bool(row.stored)
    return _record_portable(pod, batch)


@dataclass
class Recorded:
    """What storing a batch did: the pod it was for, and whether it was new."""
    pod_id: uuid.UUID
    created: bool


def record_batch_for_token(token_digest: str, batch: Batch) -> Recorded | None:
    """Store one batch for the pod whose token has this digest, committed on return; None
    when no pod has a valid token by that digest (nothing is written then).

    On PostgreSQL this is the whole request's database work: one statement in autocommit,
    on its own pooled connection (the request's session has not touched the database).
    """
    now = utcnow()
    if db.engine.dialect.name == "postgresql":
        params = {**_pg_params(batch, now), "token_digest": token_digest,
                  "ended_after": pod_tokens.ended_after(now)}
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            row = conn.execute(_PG_RECORD_BY_TOKEN, params).one()
        return None if row.pod_id is None else Recorded(row.pod_id, bool(row.stored))
    pod = pod_tokens.pod_for_digest(token_digest)
    if pod is None:
        return None
    created = _record_portable(pod, batch)
    db.session.commit()
    return Recorded(pod.id, created)


def _record_portable(pod, batch: Batch) -> bool:
    """The same writes statement by statement (SQLite, the embedded default)."""
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert
    now = utcnow()
    stored = db.session.execute(sqlite_insert(MetricBatch).values(
        pod_id=pod.id, seq=batch.seq, points=len(batch), created_at=now).on_conflict_do_nothing())
    if not stored.rowcount:
        return False
    table = MetricSeries.__table__
    chunks = chunks_of(batch)
    for chunk in chunks:
        stmt = sqlite_insert(table).values(pod_id=pod.id, name=chunk.name, experiment_id=pod.experiment_id,
                                           points=len(chunk.steps), first_step=chunk.first_step,
                                           last_step=chunk.last_step, last_value=chunk.last_value,
                                           min_value=chunk.min_value, max_value=chunk.max_value, updated_at=now)
        db.session.execute(stmt.on_conflict_do_update(index_elements=["pod_id", "name"], set_={
            "points": table.c.points + stmt.excluded.points,
            "first_step": sa.func.min(table.c.first_step, stmt.excluded.first_step),
            "last_value": sa.case((stmt.excluded.last_step >= table.c.last_step, stmt.excluded.last_value),
                                  else_=table.c.last_value),
            "last_step": sa.func.max(table.c.last_step, stmt.excluded.last_step),
            # SQLite's two-argument min() and max() are NULL when either side is: a side with
            # no finite point (NULL) must leave the other side's bound.
            "min_value": sa.func.min(sa.func.coalesce(table.c.min_value, stmt.excluded.min_value),
                                     sa.func.coalesce(stmt.excluded.min_value, table.c.min_value)),
            "max_value": sa.func.max(sa.func.coalesce(table.c.max_value, stmt.excluded.max_value),
                                     sa.func.coalesce(stmt.excluded.max_value, table.c.max_value)),
            "updated_at": now}))
    ids = dict(db.session.execute(sa.select(MetricSeries.name, MetricSeries.id).where(
        MetricSeries.pod_id == pod.id, MetricSeries.name.in_([c.name for c in chunks]))).all())
    db.session.execute(sa.insert(MetricChunk), [
        {"series_id": ids[c.name], "seq": batch.seq, "steps": c.steps, "point_values": c.values,
         "wall_times": None if all(w is None for w in c.wall_times) else c.wall_times} for c in chunks])
    return True


# --- reading ---------------------------------------------------------------------------------

def unit_of(name: str) -> str | None:
    """The unit written in brackets at the end of a metric name, if any."""
    found = _UNIT.search(name)
    return found.group(1).strip() if found else None


def label_of(name: str) -> str:
    """The metric name without its bracketed unit."""
    return _UNIT.sub("", name) or name


def pod_label(run_index: int, attempt: int | None, commit: str | None = None) -> str:
    """How a chart names a pod's line: its run (a seed, usually), the attempt if retried, and
    the commit it ran — a crashed run and its fixed rerun differ by commit."""
    parts = [f"run {run_index}"]
    if (attempt or 1) != 1:
        parts.append(f"attempt {attempt}")
    if commit:
        parts.append(commit[:7])
    return " · ".join(parts)


def run_labels(rows) -> list[str]:
    """The labels of a chart's runs (rows with run_index, attempt, name and metadata_), each
    told apart: runs that would read alike (two dispatches of one commit) add their pod's name."""
    labels = [pod_label(r.run_index, r.attempt, (r.metadata_ or {}).get("commit")) for r in rows]
    shared = {label for label in labels if labels.count(label) > 1}
    return [f"{label} · {row.name}" if label in shared else label for label, row in zip(labels, rows)]


@dataclass
class MetricSummary:
    name: str
    label: str
    unit: str | None
    pods: int
    points: int
    last_value: float | None    # mean over pods of each pod's latest value, of those that are finite
    last_min: float | None      # the spread of those latest values across pods
    last_max: float | None
    min_value: float | None     # the range of every finite point (None: no finite point yet)
    max_value: float | None
    last_step: int
    last_non_finite: int = 0    # runs whose latest value is not finite (NaN, ±Infinity)


def mean_of(values) -> float | None:
    """The mean of finite floats without a sum that could overflow (a running mean: every
    term is a share of one value, so it stays within the values' own range); None for none."""
    mean, count = None, 0
    for value in values:
        count += 1
        mean = value if mean is None else mean + (value / count - mean / count)
    return mean


def summaries_for(experiment_ids, *, pods_until=None) -> dict[uuid.UUID, dict[str, MetricSummary]]:
    """experiment id → metric name → summary, for many experiments in one query.

    Put together here from the series rows (a few per pod and metric) rather than with the
    database's avg(), which overflows on large values. `pods_until`: only the runs of pods
    started by then (what a share link shows: the runs a result was promoted with)."""
    ids = list(experiment_ids)
    if not ids:
        return {}
    query = (sa.select(MetricSeries.experiment_id, MetricSeries.name, MetricSeries.points, MetricSeries.last_value,
                       MetricSeries.min_value, MetricSeries.max_value, MetricSeries.last_step)
             .where(MetricSeries.experiment_id.in_(ids))
             .order_by(MetricSeries.experiment_id, MetricSeries.name))
    if pods_until is not None:
        query = query.join(Pod, Pod.id == MetricSeries.pod_id).where(Pod.created_at <= pods_until)
    grouped: dict[tuple, list] = {}
    for row in db.session.execute(query):
        grouped.setdefault((row.experiment_id, row.name), []).append(row)
    out: dict[uuid.UUID, dict[str, MetricSummary]] = {}
    for (experiment_id, name), rows in grouped.items():
        latest = [r.last_value for r in rows if r.last_value is not None]
        lows = [r.min_value for r in rows if r.min_value is not None]
        highs = [r.max_value for r in rows if r.max_value is not None]
        out.setdefault(experiment_id, {})[name] = MetricSummary(
            name, label_of(name), unit_of(name), len(rows), sum(r.points for r in rows), mean_of(latest),
            min(latest, default=None), max(latest, default=None), min(lows, default=None),
            max(highs, default=None), max(r.last_step for r in rows), len(rows) - len(latest))
    return out


def page_context(experiment: Experiment, *, pods_until=None) -> dict:
    """What templates/experiments/_metrics.html needs: the metric names (charts load their data)."""
    found = summaries_for([experiment.id], pods_until=pods_until).get(experiment.id, {})
    # The machine's own readings (sys/…: GPU, CPU, RAM, disk) after what the script measures.
    names = sorted(found.values(), key=lambda summary: summary.name.startswith("sys/"))
    return {"metric_summaries": names[:CHARTS_MAX], "metric_names_hidden": max(0, len(names) - CHARTS_MAX)}


# One pass over the series' chunks (their primary key), no sort: buckets of `width` steps from `lo`, every pod
# on the same grid (so overlaid runs line up), hashed by the database; the ~1,000 rows a
# series comes back as are put in order here. Width 1 is the raw points.
# The arrays are unnested in the select list (PostgreSQL's ProjectSet, the two arrays side
# by side): a quarter of the time of `CROSS JOIN LATERAL unnest(a, b)`, whose function scan
# per chunk cost ~80 ms for 100,000 points.
# A non-finite point is a NULL value: avg, min and max skip it, and the bucket counts it.
# `{mean}` is avg(value) for series of everyday magnitudes; for series past FLOAT_AVG_SAFE
# it averages as numeric, because avg(double precision) fails the query with "value out of
# range: overflow" once the squares it also sums overflow.
_DOWNSAMPLE_TEMPLATE = """
SELECT series_id, (step - :lo) / :width AS bucket, {mean} AS mean, min(value) AS low, max(value) AS high,
       min(step) AS first_step, max(step) AS last_step, count(*) - count(value) AS non_finite
FROM (SELECT series_id, unnest(steps) AS step, unnest(point_values) AS value
      FROM metric_chunks WHERE series_id = ANY(CAST(:series_ids AS BIGINT[]))) AS points
GROUP BY series_id, bucket
"""
_BUCKET_COLUMNS = dict(series_id=sa.BigInteger(), bucket=sa.BigInteger(), mean=sa.Float(), low=sa.Float(),
                       high=sa.Float(), first_step=sa.BigInteger(), last_step=sa.BigInteger(),
                       non_finite=sa.BigInteger())
_DOWNSAMPLED = sa.text(_DOWNSAMPLE_TEMPLATE.format(mean="avg(value)")).columns(**_BUCKET_COLUMNS)
_DOWNSAMPLED_LARGE = sa.text(_DOWNSAMPLE_TEMPLATE.format(
    mean="CAST(avg(CAST(value AS NUMERIC)) AS DOUBLE PRECISION)")).columns(**_BUCKET_COLUMNS)


def _buckets(series_ids: list[int], lo: int, width: int, *, large: bool = False):
    """(series id, bucket, mean, min, max, first step, last step, non-finite points) per
    non-empty bucket; mean, min and max None where the bucket holds no finite point.
    `large`: some value of these series is past FLOAT_AVG_SAFE."""
    if db.engine.dialect.name == "postgresql":
        query = _DOWNSAMPLED_LARGE if large else _DOWNSAMPLED
        yield from db.session.execute(query, {"series_ids": series_ids, "lo": lo, "width": width})
        return
    # SQLite keeps the arrays as JSON: bucket them here (the embedded default's charts are
    # small), with a running mean (mean_of's), so no sum overflows to infinity.
    groups: dict[tuple[int, int], list] = {}
    for series_id, steps, values in db.session.execute(
            sa.select(MetricChunk.series_id, MetricChunk.steps, MetricChunk.point_values)
            .where(MetricChunk.series_id.in_(series_ids))):
        for step, value in zip(steps, values):
            key = (series_id, (step - lo) // width)
            group = groups.get(key)
            if group is None:
                group = groups[key] = [None, 0, None, None, step, step, 0]
            group[4], group[5] = min(group[4], step), max(group[5], step)
            if value is None:
                group[6] += 1
                continue
            group[1] += 1
            if group[0] is None:
                group[0] = group[2] = group[3] = value
                continue
            group[0] += value / group[1] - group[0] / group[1]
            group[2], group[3] = min(group[2], value), max(group[3], value)
    for (series_id, bucket), (mean, _count, low, high, first, last, non_finite) in groups.items():
        yield series_id, bucket, mean, low, high, first, last, non_finite


def _drawable(value) -> float | None:
    """A number as the chart JSON carries it: never NaN or Infinity, which are not JSON
    (stored values are within ±VALUE_LIMIT; rows stored before that rule may not be)."""
    if value is None:
        return None
    value = float(value)
    return value if -VALUE_LIMIT <= value <= VALUE_LIMIT else None


def _series_rows(experiment: Experiment, name: str, pods_until=None):
    query = (sa.select(MetricSeries.id, MetricSeries.points, MetricSeries.first_step, MetricSeries.last_step,
                       MetricSeries.min_value, MetricSeries.max_value, Pod.run_index, Pod.attempt, Pod.name,
                       Pod.metadata_.label("metadata_"), Pod.created_at)
             .join(Pod, Pod.id == MetricSeries.pod_id)
             .where(MetricSeries.experiment_id == experiment.id, MetricSeries.name == name)
             .order_by(Pod.run_index, Pod.created_at, Pod.attempt))
    if pods_until is not None:
        query = query.where(Pod.created_at <= pods_until)
    return db.session.execute(query).all()


def chart_data(experiment: Experiment, name: str, target: int = DOWNSAMPLE_TARGET, *, pods_until=None) -> dict:
    """One metric of one experiment, every pod a series, at most about `target` buckets a
    series: {"name", "label", "unit", "series": [{"label", "pod", "attempt", "commit", "config",
    "points", "downsampled", "x", "y", "min", "max", "non_finite"}]} — `config` is the run's
    settings (its run index and services/dispatch/run_config.py's keys: charts group runs by one of
    them), `y` is the bucket's mean, `min`/`max` its range
    (all three the point itself where nothing was merged, null where the bucket holds no
    finite point), `x` the middle of the bucket's steps, `non_finite` how many of the
    bucket's points were NaN, ±Infinity or out of range (the chart marks them).
    `pods_until`: only pods started by then (a share link's promoted runs)."""
    if not isinstance(name, str) or not 1 <= len(name) <= NAME_MAX:
        raise ValidationError("Name the metric: ?name=… (1–120 characters).", field="name")
    series = _series_rows(experiment, name, pods_until)
    body = {"name": name, "label": label_of(name), "unit": unit_of(name), "series": []}
    if not series:
        return body
    lo, hi = min(row.first_step for row in series), max(row.last_step for row in series)
    width = 1 if max(row.points for row in series) <= target else -(-(hi - lo + 1) // target)
    magnitude = max((abs(v) for row in series for v in (row.min_value, row.max_value) if v is not None), default=0)
    buckets: dict = {row.id: [] for row in series}
    for series_id, bucket, mean, low, high, first, last, non_finite in _buckets(
            list(buckets), lo, width, large=magnitude > FLOAT_AVG_SAFE):
        buckets[series_id].append((bucket, (first + last) / 2, _drawable(mean), _drawable(low), _drawable(high),
                                   int(non_finite)))
    for row, label in zip(series, run_labels(series)):
        rows = sorted(buckets[row.id])
        body["series"].append({
            "label": label, "pod": row.name, "attempt": row.attempt, "commit": (row.metadata_ or {}).get("commit"),
            "config": run_config.of(row.metadata_, row.run_index), "points": int(row.points),
            "downsampled": len(rows) < row.points, "x": [r[1] for r in rows], "y": [r[2] for r in rows],
            "min": [r[3] for r in rows], "max": [r[4] for r in rows], "non_finite": [r[5] for r in rows]})
    return body


def series_version(experiment: Experiment, name, *, pods_until=None) -> str | None:
    """A tag that changes whenever a point of this metric is stored (None: no such metric)."""
    if not isinstance(name, str):
        return None
    query = (sa.select(sa.func.sum(MetricSeries.points), sa.func.max(MetricSeries.updated_at))
             .where(MetricSeries.experiment_id == experiment.id, MetricSeries.name == name))
    if pods_until is not None:
        query = query.join(Pod, Pod.id == MetricSeries.pod_id).where(Pod.created_at <= pods_until)
    count, updated = db.session.execute(query).one()
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
