"""A collaborator's search, compare, chart data and artifacts within their projects (SPEC §13):
each reads only the member's project and only promoted results (the runs and files they were
promoted with). Project A's experiment — by number, uuid, compare pair, chart data, artifact
name or search result — answers project B's collaborator the same 404 as nothing at all."""
from __future__ import annotations

import hashlib
import re
import uuid
from datetime import timedelta

import sqlalchemy as sa

from models import Artifact, Experiment, Pod, PromotedResult, db
from services.dispatch import metrics
from services.results import results
from tests.integration.queries import counting_queries
from tests.integration.test_member_pages import OWNER, _seed


def _without_csrf(html: str) -> str:
    """The page without its CSRF tokens (signed with the time, so they differ between answers)."""
    html = re.sub(r'"X-CSRFToken": "[^"]+"', "", html)
    return re.sub(r'name="csrf_token" value="[^"]+"', "", html)


def _add_run(app, number: int, *, loss: float, before_promotion: bool = True, file_text: bytes = b"loss 0.1\n"):
    """A pod with one loss point and a file, started before (or after) the promotion."""
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        promoted_at = db.session.scalar(sa.select(PromotedResult.promoted_at)
                                        .where(PromotedResult.experiment_id == experiment.id))
        when = promoted_at - timedelta(hours=1) if before_promotion else promoted_at + timedelta(hours=1)
        pod = Pod(id=uuid.uuid4(), experiment_id=experiment.id, account="local", name=f"sagan-{number}-{uuid.uuid4().hex[:6]}",
                  status="stopped", gpu_type_id="A100", gpu_count=1, cost_per_hr=1.5, uptime_seconds=60,
                  created_at=when)
        db.session.add(pod)
        db.session.flush()
        metrics.record_batch(pod, metrics.parse_batch({"seq": 0, "points": [{"step": 1, "name": "loss", "value": loss}]}))
        db.session.add(Artifact(pod_id=pod.id, experiment_id=experiment.id, name="results/loss.txt",
                                content_type="text/plain", size=len(file_text),
                                sha256=hashlib.sha256(file_text).hexdigest(), content=file_text, created_at=when))
        db.session.commit()
        return str(experiment.id)


def _promote_beta(app, numbers):
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == numbers["beta"]))
        experiment.status = "awaiting_promotion"
        results.save_clean_result(experiment, "<p>Beta's private finding.</p>", OWNER,
                                  title="Beta secret finding (HIGH confidence)")
        results.promote(experiment, "shared", OWNER, confirm_lint=True)
        db.session.commit()


def _second_alpha(app, make_experiment, project_id: str) -> int:
    number = make_experiment("Alpha warmup run", status="awaiting_promotion")
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        experiment.project_id = uuid.UUID(project_id)
        results.save_clean_result(experiment, "<p>Warmup helps a little.</p>", OWNER,
                                  title="Warmup helps a little (MODERATE confidence)")
        results.promote(experiment, "shared", OWNER, confirm_lint=True)
        db.session.commit()
    return number


def test_a_collaborator_searches_compares_and_reads_charts_and_files_of_their_project(
        app, make_experiment, two_projects, member_client):
    numbers = _seed(app, make_experiment, two_projects)
    warmup = _second_alpha(app, make_experiment, two_projects[0])
    _add_run(app, numbers["alpha"], loss=0.25)
    _add_run(app, numbers["alpha"], loss=9.0, before_promotion=False, file_text=b"rerun after promotion\n")
    _add_run(app, warmup, loss=0.5)
    ada = member_client("ada@example.org", "collaborator", projects=(0,))

    found = ada.get("/m/alpha/search", query_string={"q": "curriculum"})
    assert found.status_code == 200
    assert f"#{numbers['alpha']} " in found.text and "Curriculum ordering barely matters" in found.text
    assert "Curriculum learning revisited" in found.text  # the project's paper
    assert ada.get("/m/alpha/search", query_string={"q": f"#{numbers['alpha']}"}).text.count(
        f"/m/alpha/experiments/{numbers['alpha']}\"") == 1
    assert "Search this project's" in ada.get("/m/alpha/search").text  # the empty state

    chooser = ada.get("/m/alpha/compare")
    assert chooser.status_code == 200 and chooser.text.count('type="checkbox" name="e"') == 2
    assert 'href="/m/alpha/compare"' in ada.get("/m/alpha").text
    compared = ada.get("/m/alpha/compare", query_string={"e": [numbers["alpha"], warmup]})
    assert compared.status_code == 200
    assert "Curriculum ordering barely matters" in compared.text and "Warmup helps a little" in compared.text
    assert "0.25" in compared.text and "0.5" in compared.text
    assert "9" not in re.sub(r"<[^>]+>|#\d+|\d{4}-\d\d-\d\d", "", compared.text.split("<tbody>")[1].split("</tbody>")[0])
    assert "Spent" not in compared.text and "1.5" not in compared.text  # no costs

    chart = ada.get(f"/m/alpha/experiments/{numbers['alpha']}/metrics/data", query_string={"name": "loss"})
    assert chart.status_code == 200
    series = chart.get_json()["series"]
    assert len(series) == 1 and series[0]["y"] == [0.25]  # the rerun after the promotion is not shown

    page = ada.get(f"/m/alpha/experiments/{numbers['alpha']}")
    assert "data-metric-chart" in page.text and "results/loss.txt" in page.text
    download = ada.get(f"/m/alpha/experiments/{numbers['alpha']}/artifacts/results/loss.txt")
    assert download.status_code == 200 and download.data == b"loss 0.1\n"
    assert download.headers["Content-Disposition"].startswith("attachment")


def test_project_b_collaborator_gets_404_for_project_a_on_every_surface(app, make_experiment, two_projects,
                                                                         member_client):
    numbers = _seed(app, make_experiment, two_projects)
    _promote_beta(app, numbers)
    alpha_id = _add_run(app, numbers["alpha"], loss=0.25)
    _add_run(app, numbers["beta"], loss=0.75)
    bea = member_client("bea@example.org", "collaborator", projects=(1,))
    missing = bea.get("/m/beta/experiments/999999/metrics/data", query_string={"name": "loss"})
    assert missing.status_code == 404
    alpha, beta = numbers["alpha"], numbers["beta"]
    for path, query in ((f"/m/beta/experiments/{alpha}/metrics/data", {"name": "loss"}),
                        (f"/m/alpha/experiments/{alpha}/metrics/data", {"name": "loss"}),
                        (f"/m/beta/experiments/{alpha}/artifacts/results/loss.txt", {}),
                        (f"/m/alpha/experiments/{alpha}/artifacts/results/loss.txt", {}),
                        (f"/m/beta/experiments/{beta}/artifacts/no-such-file.txt", {}),
                        ("/m/beta/compare", {"e": [beta, alpha]}),   # a pair with A's experiment
                        ("/m/beta/compare", {"e": [beta, 999999]}),
                        ("/m/alpha/compare", {"e": [alpha]}),
                        ("/m/alpha/search", {"q": "curriculum"}),
                        (f"/m/beta/experiments/{alpha_id}", {})):     # A's experiment by uuid
        answer = bea.get(path, query_string=query)
        assert answer.status_code == 404, path
        assert _without_csrf(answer.text) == _without_csrf(missing.text), path
    # Search under B's own path finds nothing of A's: not by word, number or uuid.
    for query in ("curriculum", f"#{alpha}", alpha_id, "Bengio"):
        answer = bea.get("/m/beta/search", query_string={"q": query})
        assert answer.status_code == 200, query
        assert "Curriculum" not in answer.text and f"/experiments/{alpha}" not in answer.text, query
    # Their own project's records do answer; the compare form offers only theirs.
    own = bea.get("/m/beta/compare", query_string={"e": [beta]})
    assert own.status_code == 200 and "Beta secret finding" in own.text
    offered = bea.get("/m/beta/compare")
    assert f'name="e" value="{beta}"' in offered.text and f'value="{alpha}"' not in offered.text
    assert "Curriculum" not in offered.text
    assert bea.get(f"/m/beta/experiments/{beta}/metrics/data", query_string={"name": "loss"}).status_code == 200
    # The owner's routes for the same records stay the owner's: one 403.
    for path in (f"/experiments/{alpha}/metrics/data?name=loss", f"/experiments/compare?e={alpha}",
                 f"/experiments/{beta}/metrics/data?name=loss"):
        assert bea.get(path).status_code == 403, path


def test_a_mentor_and_unpromoted_experiments_are_out_of_reach(app, make_experiment, two_projects, member_client):
    """Mentors read no experiment, so none of these surfaces; an experiment without a promoted
    result has no chart data or files for a collaborator."""
    numbers = _seed(app, make_experiment, two_projects)
    _add_run(app, numbers["alpha"], loss=0.25)
    mentor = member_client("max@example.org", "mentor", projects=(0,))
    for path in ("/m/alpha/search?q=curriculum", f"/m/alpha/compare?e={numbers['alpha']}",
                 f"/m/alpha/experiments/{numbers['alpha']}/metrics/data?name=loss"):
        assert mentor.get(path).status_code == 403, path
    with app.app_context():
        db.session.execute(sa.delete(PromotedResult))
        db.session.commit()
    ada = member_client("ada@example.org", "collaborator", projects=(0,))
    assert ada.get(f"/m/alpha/experiments/{numbers['alpha']}/metrics/data?name=loss").status_code == 404
    assert ada.get(f"/m/alpha/experiments/{numbers['alpha']}/artifacts/results/loss.txt").status_code == 404
    assert ada.get(f"/m/alpha/compare?e={numbers['alpha']}").status_code == 404


def test_bad_input_is_a_clear_400(app, make_experiment, two_projects, member_client):
    _seed(app, make_experiment, two_projects)
    ada = member_client("ada@example.org", "collaborator", projects=(0,))
    too_long = ada.get("/m/alpha/search", query_string={"q": "x" * 201})
    assert too_long.status_code == 400 and "at most 200 characters" in too_long.text
    for bad in ("abc", "1;2", "-3", "99999999999999"):
        answer = ada.get("/m/alpha/compare", query_string={"e": bad})
        assert answer.status_code == 400 and "is not an experiment number" in answer.text, bad
    many = ada.get("/m/alpha/compare", query_string={"e": ",".join(str(n) for n in range(1, 15))})
    assert many.status_code == 400 and "compare at most" in many.text
    assert ada.get("/m/alpha/search", query_string={"q": "100%_\\"}).status_code == 200  # LIKE wildcards are text


def test_search_reads_a_constant_number_of_statements(app, make_experiment, two_projects, member_client):
    numbers = _seed(app, make_experiment, two_projects)
    ada = member_client("ada@example.org", "collaborator", projects=(0,))
    ada.get("/m/alpha/search?q=run")

    def count() -> int:
        with counting_queries() as statements:
            assert ada.get("/m/alpha/search?q=run").status_code == 200
        return len(statements)

    few = count()
    for index in range(6):
        number = make_experiment(f"Alpha extra run {index}", status="proposed")
        with app.app_context():
            db.session.execute(sa.update(Experiment).where(Experiment.number == number)
                               .values(project_id=uuid.UUID(two_projects[0])))
            db.session.commit()
    assert count() == few
    assert numbers  # the seed's experiments are searched too


def test_the_member_routes_name_their_action(app):
    """Search, compare, charts, files: collaborators' (read_experiment); shared runs need their
    own action; the owner's toggle stays the owner's."""
    rule_of = {name: getattr(view, "access_rule", None) for name, view in app.view_functions.items()}
    for endpoint in ("member_research.search", "member_research.compare", "member_research.chart_data",
                     "member_research.artifact"):
        assert rule_of[endpoint] == ("allow", "read_experiment"), endpoint
    assert rule_of["member_research.run"] == ("allow", "read_shared_agent_logs")
    assert rule_of["experiments.share_agent_logs"] == ("owner", None)
