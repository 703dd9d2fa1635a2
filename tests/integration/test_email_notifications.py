"""Email notifications (SPEC §12.5) through a real SMTP server on loopback (tests/fakes/smtp_server.py):
owner turns batched per interval, failures at once, links that open the page, one-click
unsubscribe per kind, quiet hours on the owner's clock, retries with back-off ending in a
failure shown on Settings, and the settings' own checks."""
from __future__ import annotations

import logging
import re
import subprocess
import time
from datetime import date, datetime, timedelta, timezone
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa
from rq.registry import ScheduledJobRegistry

from models import Notification, NotificationEmail, db
from services.core import clock, redis_store, settings
from services.core.actors import Actor
from services.day import weekly_review
from services.workflow import email_notify, email_settings, experiments, jobs, lifecycle
from tests.conftest import csrf_from
from tests.fakes.smtp_server import FakeSmtp
from tests.integration.queries import counting_queries
from workers import scheduler

OWNER_ADDRESS = "owner@example.org"
SENDER = "sagan@example.org"
EMAIL_KEYS = ("smtp_host", "smtp_port", "smtp_security", "smtp_user", "smtp_password", "smtp_from", "notify_email",
              "email_kinds", "quiet_hours", "owner_turn_email_minutes")


def _configure(app, fake: FakeSmtp, **extra) -> None:
    with app.app_context():
        for key, value in {"smtp_host": fake.host, "smtp_port": fake.port, "smtp_security": "none",
                           "smtp_from": SENDER, "notify_email": OWNER_ADDRESS, "owner_turn_email_minutes": 30,
                           **extra}.items():
            settings.put(key, value)
        db.session.commit()


@pytest.fixture
def smtp(app, monkeypatch):
    """The loopback SMTP server, configured in Settings; one-second SMTP timeout, retries after 10 s and 60 s."""
    monkeypatch.setitem(app.config, "SMTP_TIMEOUT_SECONDS", 1)
    monkeypatch.setitem(app.config, "EMAIL_RETRY_SECONDS", [10, 60])
    with app.app_context():
        # The week's review is due on the real clock: drafted now, before email is set up, so
        # the tests' scheduler ticks do not draft it (and email about it) in the middle.
        weekly_review.draft_due()
    with FakeSmtp(hold_seconds=3) as fake:
        _configure(app, fake)
        yield fake


def _move(app, number: int, to: str, note: str | None = None, actor: Actor | None = None) -> None:
    """A real move, committed, then its side effects (the email hook among them)."""
    with app.app_context():
        effects = lifecycle.transition(experiments.get_experiment(number), to, actor or Actor.system(), note=note)
        db.session.commit()
        lifecycle.run_side_effects(effects)


def _block(app, make_experiment, title: str) -> int:
    number = make_experiment(title, status="running")
    _move(app, number, "blocked", note="Pod exited with code 1 (CUDA out of memory)")
    return number


def _links(text: str) -> list[str]:
    return re.findall(r"https?://\S+", text)


def _local(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def test_owner_turn_batch_and_failure_reach_the_server_with_working_links(app, client, owner, smtp, worker,
                                                                         make_experiment):
    """The first owner turn is emailed at once; the next two wait for the interval and then go
    together in one email; a block is emailed at once. Each goes to the owner's address only,
    in plain text and HTML, and its links open the experiment's page."""
    first = make_experiment("Sweep learning rates", status="planning")
    _move(app, first, "plan_pending")
    second, third = (make_experiment(title, status="planning") for title in ("Ablate warmup", "Probe layer 12"))
    _move(app, second, "plan_pending")
    _move(app, third, "plan_pending")
    blocked = _block(app, make_experiment, "Train the <b>big</b> model")
    worker()
    subjects = [r.message["Subject"] for r in smtp.received]
    assert subjects == ["Your turn: 1 waiting", f"Failed or blocked: #{blocked} Train the <b>big</b> model — "
                        "Owner turn: unblock or revise"]

    with app.app_context():
        scheduler.tick(app)  # within the interval: the two stay waiting
    worker()
    assert len(smtp.received) == 2
    clock.advance(timedelta(minutes=31))
    with app.app_context():
        scheduler.tick(app)  # the scheduler's next tick after the interval sends them together
    worker()
    batch = smtp.received[-1]
    assert batch.message["Subject"] == "Your turn: 2 waiting"
    for received in smtp.received:
        assert received.recipients == [OWNER_ADDRESS] and received.message["To"] == OWNER_ADDRESS
        assert received.sender == SENDER
        assert received.message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        assert received.message["List-Unsubscribe"].startswith("<http://localhost/email/unsubscribe/")
    text, html = batch.part("plain"), batch.part("html")
    for number, title in ((second, "Ablate warmup"), (third, "Probe layer 12")):
        assert f"#{number} {title}" in text and f"http://localhost/experiments/{number}" in text
        assert re.search(rf'<a href="http://localhost/experiments/{number}"[^>]*>#{number} {title}', html)
        page = client.get(_local(f"http://localhost/experiments/{number}"))
        assert page.status_code == 200 and title in page.text
    failure_html = smtp.received[1].part("html")
    assert "<b>big</b>" not in failure_html and "&lt;b&gt;big&lt;/b&gt;" in failure_html  # record text escaped
    link = [url for url in _links(smtp.received[1].part("plain")) if "/experiments/" in url][0]
    assert client.get(_local(link)).status_code == 200


def test_an_owner_turn_the_owner_answered_meanwhile_is_not_emailed(app, smtp, worker, make_experiment):
    """A held owner turn whose experiment left the owner's turn before the batch went is dropped."""
    first = make_experiment("Already emailed", status="planning")
    _move(app, first, "plan_pending")
    answered = make_experiment("Answered in time", status="planning")
    _move(app, answered, "plan_pending")
    _move(app, answered, "cancelled", note="Not needed after all", actor=Actor("owner", None, "Owner"))
    clock.advance(timedelta(minutes=31))
    with app.app_context():
        assert email_notify.send_due() == 0
        assert db.session.query(Notification).filter(Notification.email_id.is_(None)).count() == 0
    worker()
    assert [r.message["Subject"] for r in smtp.received] == ["Your turn: 1 waiting"]


def _unsubscribe_url(received) -> str:
    return received.message["List-Unsubscribe"].strip("<>")


def test_one_click_unsubscribe_stops_that_kind_only(app, smtp, worker, make_experiment):
    """The link asks first (GET changes nothing), then a POST with no session — the mail
    client's RFC 8058 one-click — turns off owner-turn emails only: failures still arrive."""
    number = make_experiment("Needs a plan", status="planning")
    _move(app, number, "plan_pending")
    worker()
    url = _unsubscribe_url(smtp.received[0])
    stranger = app.test_client()  # no login, no cookie
    asked = stranger.get(_local(url))
    assert asked.status_code == 200 and "Stop “Your turn (batched)” emails?" in asked.text
    with app.app_context():
        assert email_settings.kinds_enabled()["owner_turn"] is True
    done = stranger.post(_local(url), data={"List-Unsubscribe": "One-Click"})
    assert done.status_code == 200 and "Unsubscribed" in done.text
    assert "Set-Cookie" not in done.headers
    with app.app_context():
        assert email_settings.kinds_enabled() == {"owner_turn": False, "result_ready": True, "failure": True,
                                                  "weekly_review": True}
    clock.advance(timedelta(minutes=31))
    later = make_experiment("Another plan", status="planning")
    _move(app, later, "plan_pending")
    blocked = _block(app, make_experiment, "Crashed run")
    worker()
    assert [r.message["Subject"].split(":")[0] for r in smtp.received] == ["Your turn", "Failed or blocked"]
    assert f"#{blocked}" in smtp.received[-1].message["Subject"]


def test_a_tampered_expired_or_foreign_link_changes_nothing(app, smtp, monkeypatch):
    """A token with a changed character, one older than a year, one signed with another key
    and one naming no kind: each answers 404 with the reason, and no preference changes."""
    from itsdangerous import URLSafeTimedSerializer
    with app.app_context():
        good = email_notify.unsubscribe_token("failure")
        with monkeypatch.context() as patch:
            patch.setattr(time, "time", lambda: datetime.now(timezone.utc).timestamp() - 400 * 86400)
            expired = email_notify.unsubscribe_token("failure")
        foreign = URLSafeTimedSerializer("another-key", salt=email_notify.UNSUBSCRIBE_SALT).dumps({"kind": "failure"})
        no_kind = URLSafeTimedSerializer(app.config["SECRET_KEY"], salt=email_notify.UNSUBSCRIBE_SALT).dumps(
            {"kind": "everything"})
        before = {key: settings.get(key) for key in EMAIL_KEYS}
    tampered = good[:-3] + ("A" if good[-3] != "A" else "B") + good[-2:]
    stranger = app.test_client()
    for token in (tampered, expired, foreign, no_kind):
        for method in ("GET", "POST"):
            answer = stranger.open(f"/email/unsubscribe/{token}", method=method)
            assert answer.status_code == 404, (token, method)
            assert "nothing was changed" in answer.text
    with app.app_context():
        assert {key: settings.get(key) for key in EMAIL_KEYS} == before
        assert email_settings.kinds_enabled()["failure"] is True


def _scheduled(app) -> dict:
    with app.app_context():
        registry = ScheduledJobRegistry(queue=jobs.queue(jobs.DEFAULT), connection=redis_store.connection())
        return {job_id: registry.get_scheduled_time(job_id) for job_id in registry.get_job_ids()}


def _requeue_scheduled(app) -> None:
    """What RQ's scheduler does once a retry's time comes (the test worker runs without one)."""
    with app.app_context():
        registry = ScheduledJobRegistry(queue=jobs.queue(jobs.DEFAULT), connection=redis_store.connection())
        for job_id in registry.get_job_ids():
            registry.requeue(job_id)


@pytest.mark.parametrize("mode", ["refuse", "defer", "timeout", "drop"])
def test_a_failing_server_is_retried_with_back_off_then_shown_failed(app, client, owner, smtp, worker,
                                                                      make_experiment, mode):
    """Refused (5xx, 4xx), silent past the timeout, or hanging up: the email is retried after
    10 s, then 60 s; after the last try it is marked failed and listed on Settings with the
    server's answer. The move that caused it stands, and the next email still goes."""
    smtp.script(mode, mode, mode)
    number = _block(app, make_experiment, "Unlucky run")
    for back_off in (10, 60):
        started = datetime.now(timezone.utc).replace(microsecond=0)
        worker()
        finished = datetime.now(timezone.utc)
        scheduled = list(_scheduled(app).values())
        # The retry waits `back_off` seconds from the failure, which happened within the worker's run.
        assert len(scheduled) == 1
        assert started + timedelta(seconds=back_off) <= scheduled[0] <= finished + timedelta(seconds=back_off)
        _requeue_scheduled(app)
    worker()
    assert _scheduled(app) == {} and smtp.received == [] and smtp.attempts == 3
    with app.app_context():
        email = db.session.query(NotificationEmail).one()
        assert (email.status, email.attempts) == ("failed", 3)
        assert experiments.get_experiment(number).status == "blocked"
    expected = {"refuse": "550 5.7.1 Message rejected by policy", "defer": "451 4.3.0 Try again later",
                "timeout": "did not answer in time", "drop": "closed the connection"}[mode]
    assert expected in email.last_error
    page = client.get("/settings")
    assert "Emails not sent" in page.text and f"#{number} Unlucky run" in page.text
    assert expected in page.text

    later = _block(app, make_experiment, "Next run")  # the server works again: nothing is stuck behind
    worker()
    assert [r.message["Subject"] for r in smtp.received] == [f"Failed or blocked: #{later} Next run — "
                                                             "Owner turn: unblock or revise"]
    again = client.post(f"/settings/email/failed/{email.id}/retry", data={"csrf_token": owner.csrf()})
    assert again.status_code == 303
    worker()
    assert smtp.received[-1].message["Subject"] == f"Failed or blocked: #{number} Unlucky run — " \
                                                   "Owner turn: unblock or revise"
    assert "Unlucky run" not in client.get("/settings").text
    with app.app_context():
        assert db.session.get(NotificationEmail, email.id).status == "sent"


def test_a_failed_email_can_be_dismissed(app, client, owner, smtp, worker, make_experiment, monkeypatch):
    monkeypatch.setitem(app.config, "EMAIL_RETRY_SECONDS", [])
    smtp.script("refuse")
    _block(app, make_experiment, "Refused once")
    worker()
    with app.app_context():
        email_id = db.session.query(NotificationEmail).one().id
    assert "Refused once" in client.get("/settings").text
    dismissed = client.post(f"/settings/email/failed/{email_id}/dismiss", data={"csrf_token": owner.csrf()})
    assert dismissed.status_code == 303
    assert "Refused once" not in client.get("/settings").text
    with app.app_context():
        assert db.session.query(NotificationEmail).count() == 0


def test_quiet_hours_hold_messages_and_send_them_batched_after_on_the_owners_clock(app, smtp, worker,
                                                                                   make_experiment, monkeypatch):
    """Quiet hours around Berlin's now hold two failures; moving the owner to New York (six
    hours back, outside the quiet hours) sends them at the next tick, in one email; back in
    Berlin, the next ones are held until the quiet hours end there."""
    monkeypatch.setitem(app.config, "SAGAN_TIME_ZONE", "Europe/Berlin")
    berlin_now = clock.utcnow().astimezone(email_settings.ZoneInfo("Europe/Berlin"))
    quiet = {"start": (berlin_now - timedelta(minutes=10)).strftime("%H:%M"),
             "end": (berlin_now + timedelta(minutes=50)).strftime("%H:%M")}
    with app.app_context():
        settings.put("quiet_hours", quiet)
        db.session.commit()
    first, second = (_block(app, make_experiment, title) for title in ("Night crash", "Second night crash"))
    worker()
    assert smtp.received == []
    with app.app_context():
        assert email_notify.send_due() == 0  # still quiet
        assert db.session.query(Notification).filter(Notification.email_id.is_(None)).count() == 2

    monkeypatch.setitem(app.config, "SAGAN_TIME_ZONE", "America/New_York")
    with app.app_context():
        assert email_notify.send_due() == 1
    worker()
    assert len(smtp.received) == 1
    assert smtp.received[0].message["Subject"] == "2 experiments failed or blocked"
    assert f"#{first} Night crash" in smtp.received[0].part("plain")
    assert f"#{second} Second night crash" in smtp.received[0].part("plain")

    monkeypatch.setitem(app.config, "SAGAN_TIME_ZONE", "Europe/Berlin")
    third = _block(app, make_experiment, "Third crash")
    worker()
    assert len(smtp.received) == 1  # quiet again on the Berlin clock
    clock.advance(timedelta(minutes=51))
    with app.app_context():
        assert email_notify.send_due() == 1
    worker()
    assert f"#{third}" in smtp.received[-1].message["Subject"]


def test_weekly_review_hook_emails_a_link_to_the_review(app, smtp, worker):
    """notify_weekly_review_drafted (called by the weekly review's drafter) emails its link."""
    with app.app_context():
        email_notify.notify_weekly_review_drafted("r-1", "Week 49: what we learned", "/reviews/7")
    worker()
    assert smtp.received[0].message["Subject"] == "Weekly review drafted: Week 49: what we learned"
    assert "http://localhost/reviews/7" in smtp.received[0].part("plain")


def test_a_drafted_weekly_review_emails_once_with_a_working_link(app, client, owner, smtp, worker):
    """The drafter's hook: one email for a new review, none when the job runs again for the week."""
    week = date(2026, 11, 22)  # a week the fixture's draft_due did not draft
    with app.app_context():
        weekly_review.draft(week, "scheduler")
        weekly_review.draft(week, "scheduler")
    worker()
    assert [m.message["Subject"] for m in smtp.received] == ["Weekly review drafted: the week ending 2026-11-22"]
    link = next(url for url in _links(smtp.received[0].part("plain")) if "/reviews/" in url)
    assert client.get(_local(link)).status_code == 200


def test_a_clean_result_waiting_for_promotion_is_emailed_as_result_ready(app, client, owner, smtp, worker,
                                                                         make_experiment):
    """Entering awaiting_promotion (the clean result is written) sends "result ready", not a
    your-turn email, with a link to the experiment."""
    number = make_experiment("Curriculum ordering", status="awaiting_promotion")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        effects = lifecycle.effects_of_move(None, "awaiting_promotion", experiment.id, Actor.system(), {}, None)
        lifecycle.run_side_effects(effects)
    worker()
    assert [r.message["Subject"] for r in smtp.received] == [
        f"Result ready: #{number} Curriculum ordering — Owner turn: promote clean result"]
    link = f"http://localhost/experiments/{number}"
    assert link in smtp.received[0].part("plain") and client.get(_local(link)).status_code == 200


def test_nothing_is_kept_or_sent_without_email_settings(app, worker, make_experiment):
    """With no SMTP server set, moves record no notification and queue no email, and the
    email hook costs a move one query."""
    number = make_experiment("Quiet install", status="planning")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        with counting_queries() as statements:
            email_notify.on_move(experiment.id, Actor.system(), {"status": "plan_pending"})
        assert len(statements) == 1
    _move(app, number, "plan_pending")
    with app.app_context():
        assert db.session.query(Notification).count() == 0
        assert db.session.query(NotificationEmail).count() == 0


# --- Settings ------------------------------------------------------------------------------

GOOD_FORM = {"host": "127.0.0.1", "port": "2525", "security": "none", "user": "", "password": "",
             "sender": SENDER, "owner": OWNER_ADDRESS}


@pytest.mark.parametrize("field, value, message", [
    ("port", "0", "between 1 and 65535"),
    ("port", "70000", "between 1 and 65535"),
    ("port", "twenty-five", "between 1 and 65535"),
    ("owner", "not-an-address", "one email address"),
    ("owner", "owner@example.org, mentor@example.org", "one email address"),
    ("owner", "owner@example.org\r\nBcc: mentor@example.org", "one email address"),
    ("sender", "", "one email address"),
    ("host", "", "host name"),
    ("host", "smtp example org", "host name"),
    ("security", "ssl3", "security"),
    ("user", "a\nb", "one line"),
])
def test_bad_server_settings_are_refused_and_change_nothing(app, client, owner, field, value, message):
    with app.app_context():
        before = {key: settings.get(key) for key in EMAIL_KEYS}
    answer = client.post("/settings/email", data={**GOOD_FORM, field: value, "csrf_token": owner.csrf()})
    assert answer.status_code == 422 and message in answer.text
    with app.app_context():
        assert {key: settings.get(key) for key in EMAIL_KEYS} == before


@pytest.mark.parametrize("form, message", [
    ({"quiet_start": "22:00", "quiet_end": ""}, "or neither"),
    ({"quiet_start": "25:00", "quiet_end": "07:00"}, "times like 22:00"),
    ({"quiet_start": "07:00", "quiet_end": "07:00"}, "differ"),
    ({"interval": "-1"}, "0 to 1440 minutes"),
    ({"interval": "soon"}, "0 to 1440 minutes"),
])
def test_bad_preferences_are_refused_and_change_nothing(app, client, owner, form, message):
    with app.app_context():
        before = {key: settings.get(key) for key in EMAIL_KEYS}
    answer = client.post("/settings/email/preferences", data={"interval": "30", "kind_failure": "1", **form,
                                                              "csrf_token": owner.csrf()})
    assert answer.status_code == 422 and message in answer.text
    with app.app_context():
        assert {key: settings.get(key) for key in EMAIL_KEYS} == before


def test_preferences_save_kinds_quiet_hours_and_interval(app, client, owner):
    answer = client.post("/settings/email/preferences", data={
        "kind_failure": "1", "kind_weekly_review": "1", "quiet_start": "22:00", "quiet_end": "07:00",
        "interval": "60", "csrf_token": owner.csrf()})
    assert answer.status_code == 303
    with app.app_context():
        assert email_settings.kinds_enabled() == {"owner_turn": False, "result_ready": False, "failure": True,
                                                  "weekly_review": True}
        assert email_settings.quiet_hours() == {"start": "22:00", "end": "07:00"}
        assert email_settings.owner_turn_interval_minutes() == 60


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_the_smtp_password_is_never_shown_or_logged(app, client, owner, worker, make_experiment, caplog,
                                                    monkeypatch):
    """A server that wants a login: a wrong password is refused (535) and the error shown —
    without the password, on the page, in the log and in the stored error; the right one
    sends the test email. The settings page never shows it back."""
    monkeypatch.setitem(app.config, "SMTP_TIMEOUT_SECONDS", 1)
    monkeypatch.setitem(app.config, "EMAIL_RETRY_SECONDS", [])
    wrong, right = "Wr0ng-Secret-Passw0rd", "R1ght-Secret-Passw0rd"
    caplog.set_level(logging.DEBUG)
    with FakeSmtp(user="sagan", password=right) as fake:
        saved = client.post("/settings/email", data={**GOOD_FORM, "port": str(fake.port), "user": "sagan",
                                                     "password": wrong, "csrf_token": owner.csrf()})
        assert saved.status_code == 303
        page = client.get("/settings")
        assert wrong not in page.text and "a password is saved" in page.text
        refused = client.post("/settings/email/test", data={"csrf_token": owner.csrf()})
        assert refused.status_code == 422 and "535" in refused.text and wrong not in refused.text
        assert fake.auth_failures  # the server did see a login try
        _block(app, make_experiment, "Auth failure run")
        worker()
        with app.app_context():
            email = db.session.query(NotificationEmail).one()
            assert email.status == "failed" and "535" in email.last_error and wrong not in email.last_error
        assert wrong not in client.get("/settings").text
        # A later save without a password keeps the saved one; the right one is then used.
        client.post("/settings/email", data={**GOOD_FORM, "port": str(fake.port), "user": "sagan",
                                             "password": right, "csrf_token": owner.csrf()})
        sent = client.post("/settings/email/test", data={"csrf_token": owner.csrf()})
        assert sent.status_code == 200 and f"Sent a test email to {OWNER_ADDRESS}" in sent.text
        assert fake.received[-1].message["Subject"] == "Sagan test email"
        kept = client.post("/settings/email", data={**GOOD_FORM, "port": str(fake.port), "user": "sagan",
                                                    "password": "", "csrf_token": owner.csrf()})
        assert kept.status_code == 303
        with app.app_context():
            assert settings.get("smtp_password") == right
    for secret in (wrong, right):
        assert secret not in caplog.text


def test_an_owner_address_from_the_environment_that_is_not_one_address_gets_no_email(app, worker, make_experiment,
                                                                                     monkeypatch):
    """SAGAN_NOTIFY_EMAIL naming two addresses is refused at sending (the owner's one address is
    the only recipient); the email is marked failed with the reason, and nothing is sent."""
    monkeypatch.setitem(app.config, "EMAIL_RETRY_SECONDS", [])
    with FakeSmtp() as fake:
        monkeypatch.setitem(app.config, "SAGAN_NOTIFY_EMAIL", "owner@example.org, mentor@example.org")
        monkeypatch.setitem(app.config, "SAGAN_SMTP_HOST", fake.host)
        monkeypatch.setitem(app.config, "SAGAN_SMTP_PORT", fake.port)
        monkeypatch.setitem(app.config, "SAGAN_SMTP_SECURITY", "none")
        monkeypatch.setitem(app.config, "SAGAN_SMTP_FROM", SENDER)
        _block(app, make_experiment, "Env-configured run")
        worker()
        assert fake.attempts == 0 and fake.received == []
    with app.app_context():
        email = db.session.query(NotificationEmail).one()
        assert email.status == "failed" and "SAGAN_NOTIFY_EMAIL" in email.last_error


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (openssl), and its key."""
    folder = tmp_path_factory.mktemp("smtp-tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return str(cert), str(key)


@pytest.mark.parametrize("security", ["starttls", "tls"])
def test_starttls_and_tls_verify_the_servers_certificate(app, client, owner, certificate, monkeypatch, security):
    """Over STARTTLS and implicit TLS the test email arrives when the server's certificate is
    trusted, and is refused with the reason when it is not (no silent fallback to plain text)."""
    cert, key = certificate
    with FakeSmtp(security=security, cert_file=cert, key_file=key) as fake:
        form = {**GOOD_FORM, "port": str(fake.port), "security": security, "csrf_token": owner.csrf()}
        assert client.post("/settings/email", data=form).status_code == 303
        untrusted = client.post("/settings/email/test", data={"csrf_token": owner.csrf()})
        assert untrusted.status_code == 422 and "CERTIFICATE_VERIFY_FAILED" in untrusted.text
        assert fake.received == []
        monkeypatch.setenv("SSL_CERT_FILE", cert)  # trust it, as an operator's CA bundle would
        sent = client.post("/settings/email/test", data={"csrf_token": owner.csrf()})
        assert sent.status_code == 200 and "Sent a test email" in sent.text
        assert fake.received[-1].message["Subject"] == "Sagan test email"


def test_an_invitation_is_emailed_to_the_invited_address_only_with_a_working_link(app, client, two_projects, smtp):
    """With email set up, inviting sends the one-time link to the invited address (the one
    recipient the owner named in that form) and the page says so; the link opens the join page."""
    page = client.get("/settings/members")
    client.post("/settings/members/invite", data={"email": "ada@example.org", "role": "collaborator",
                                                  "projects": [two_projects[0]], "csrf_token": csrf_from(page.text)})
    shown = client.get("/settings/members").text
    assert "Invitation sent" in shown and "/join/inv_" not in shown
    [received] = smtp.received
    assert received.recipients == ["ada@example.org"]
    assert received.message["Subject"] == "You are invited to Sagan as a collaborator"
    link = next(url for url in _links(received.part("plain")) if "/join/inv_" in url)
    assert app.test_client().get(_local(link)).status_code == 200
    with app.app_context():  # the link itself is never stored: no email row holds it
        assert db.session.scalar(sa.select(sa.func.count()).select_from(NotificationEmail)) == 0


def test_an_invitation_the_server_refuses_falls_back_to_the_link_to_copy(app, client, two_projects, smtp):
    smtp.script("refuse")
    page = client.get("/settings/members")
    client.post("/settings/members/invite", data={"email": "bo@example.org", "role": "mentor",
                                                  "projects": [two_projects[1]], "csrf_token": csrf_from(page.text)})
    shown = client.get("/settings/members").text
    assert "Copy the invitation link now" in shown and "/join/inv_" in shown
    assert smtp.received == []
