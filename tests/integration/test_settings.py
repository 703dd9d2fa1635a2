"""The settings page: GPU prices and the auto-approve limit drive estimates."""
from __future__ import annotations

from services.core import settings
from services.dispatch import costs


def test_prices_saved_and_used_in_estimates(app, client, owner):
    """Does a saved H200 price make estimates for H200 known?"""
    response = client.post("/settings/pricing", data={"price-H200": "3.50", "auto_approve_max_usd": "25",
                                                      "csrf_token": owner.csrf()})
    assert response.status_code == 303
    with app.app_context():
        assert costs.owner_gpu_prices()["H200"] == 3.5
        assert settings.get("auto_approve_max_usd") == 25.0
        estimate = costs.estimate([{"gpuType": "H200", "gpuCount": 2, "estimatedMinutes": 60}],
                                  costs.owner_gpu_prices())
        assert estimate.total_usd == 7.0 and estimate.unknown_prices == []
    assert 'value="3.5"' in client.get("/settings").text


def test_bad_settings_refused_and_nothing_saved(app, client, owner):
    """Do a non-number price, a negative limit, a huge price get a message and change nothing?"""
    for data in ({"price-A100": "cheap", "auto_approve_max_usd": "50"},
                 {"auto_approve_max_usd": "-1"}, {"price-H100": "5000", "auto_approve_max_usd": "5"},
                 {"auto_approve_max_usd": ""}):
        page = client.post("/settings/pricing", data={**data, "csrf_token": owner.csrf()})
        assert page.status_code == 200 and 'class="error"' in page.text, data
    with app.app_context():
        assert settings.get("gpu_prices") is None
        assert settings.get("auto_approve_max_usd") == 50.0


def test_unknown_price_is_never_invented(app):
    """Is an unpriced GPU reported as unknown rather than guessed?"""
    with app.app_context():
        estimate = costs.estimate([{"gpuType": "L40S", "estimatedMinutes": 60}], costs.owner_gpu_prices())
        assert estimate.total_usd is None and estimate.unknown_prices == ["L40S"]
        assert estimate.as_json()["note"] == "price unknown — set it in settings"


def test_research_repository_setting(app, client, owner, monkeypatch):
    """https and ssh URLs are kept; file paths only with SAGAN_ALLOW_LOCAL_REPO; bad input changes nothing."""
    csrf = owner.csrf()
    monkeypatch.setitem(app.config, "SAGAN_ALLOW_LOCAL_REPO", False)
    for bad in ("file:///srv/repo", "/srv/repo", "ftp://x/repo.git", "not a url", ""):
        page = client.post("/settings/research-repository", data={"research_repo_url": bad, "csrf_token": csrf})
        assert 'class="error"' in page.text, bad
    bad_branch = client.post("/settings/research-repository", data={
        "research_repo_url": "git@github.com:org/research.git", "research_repo_branch": "../main", "csrf_token": csrf})
    assert "not a valid git branch" in bad_branch.text
    with app.app_context():
        assert settings.get("research_repo_url") is None
    ok = client.post("/settings/research-repository", data={
        "research_repo_url": "git@github.com:org/research.git", "research_repo_branch": "main",
        "research_repo_test_command": "pytest -q", "csrf_token": csrf})
    assert ok.status_code == 303
    monkeypatch.setitem(app.config, "SAGAN_ALLOW_LOCAL_REPO", True)
    local = client.post("/settings/research-repository", data={"research_repo_url": "/srv/repo",
                                                               "research_repo_test_command": "pytest -q",
                                                               "csrf_token": csrf})
    assert local.status_code == 303
    with app.app_context():
        assert settings.get("research_repo_url") == "/srv/repo"
        assert settings.get("research_repo_test_command") == "pytest -q"


def test_private_repository_credentials_are_variable_names(app, client, owner):
    """The checkout folder and the deploy token / SSH key variables: names only, never a value, never
    one of Sagan's own settings; bad input answers with the error and changes nothing."""
    csrf = owner.csrf()
    base = {"research_repo_url": "git@github.com:org/research.git", "research_repo_branch": "main",
            "csrf_token": csrf}
    for field, bad, words in (("research_repo_token_env", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "not its value"),
                              ("research_repo_token_env", "SECRET_KEY", "never given to a pod"),
                              ("research_repo_ssh_key_env", "RUNPOD_API_KEY_TEAM", "never given to a pod"),
                              ("research_repo_dir", "../etc", "checkout folder"),
                              ("research_repo_dir", ".sagan", "checkout folder")):
        page = client.post("/settings/research-repository", data={**base, field: bad})
        assert page.status_code == 200 and words in page.text, (field, bad)
        with app.app_context():
            assert settings.get("research_repo_url") is None and settings.get(field) is None
    ok = client.post("/settings/research-repository", data={
        **base, "research_repo_dir": "explore-persona-space", "research_repo_token_env": "RESEARCH_REPO_TOKEN",
        "research_repo_ssh_key_env": "RESEARCH_REPO_SSH_KEY"})
    assert ok.status_code == 303
    with app.app_context():
        assert settings.get("research_repo_dir") == "explore-persona-space"
        assert settings.get("research_repo_token_env") == "RESEARCH_REPO_TOKEN"
        assert settings.get("research_repo_ssh_key_env") == "RESEARCH_REPO_SSH_KEY"
    page = client.get("/settings")
    assert 'value="RESEARCH_REPO_TOKEN"' in page.text and "Pod accounts" in page.text


def test_daily_cap_setting(app, client, owner):
    """The daily cap is optional, must be positive, and is stored."""
    csrf = owner.csrf()
    bad = client.post("/settings/pricing", data={"auto_approve_max_usd": "50", "daily_cap_usd": "-3", "csrf_token": csrf})
    assert "daily cap must be above 0" in bad.text
    ok = client.post("/settings/pricing", data={"auto_approve_max_usd": "50", "daily_cap_usd": "25", "csrf_token": csrf})
    assert ok.status_code == 303
    with app.app_context():
        assert settings.get("daily_cap_usd") == 25.0


def test_owner_sets_branch_and_commit_on_the_record(app, client, owner, make_experiment):
    """The code pods run can be set on the experiment page (SPEC §5.7); spaces are refused."""
    from services.workflow import experiments
    number = make_experiment("Code")
    csrf = owner.csrf()
    bad = client.post(f"/experiments/{number}/edit", data={"title": "Code", "git_commit": "abc def", "csrf_token": csrf},
                      follow_redirects=True)
    assert 'class="error"' in bad.text
    client.post(f"/experiments/{number}/edit", data={"title": "Code", "git_branch": "experiment-7",
                                                      "git_commit": "0123abcd", "csrf_token": csrf})
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert (experiment.git_branch, experiment.git_commit) == ("experiment-7", "0123abcd")


def test_results_page_lists_clean_results(app, client, owner, make_experiment):
    """/results lists experiments with a clean result, with its confidence; empty state otherwise."""
    from services.core.actors import Actor
    from services.results import results
    from services.workflow import experiments
    assert "No clean results yet" in client.get("/results").text
    number = make_experiment("Seeds agree (LOW confidence)")
    with app.app_context():
        results.save_clean_result(experiments.get_experiment(number), "<p>Both seeds agree.</p>", Actor("owner"))
        from models import db
        db.session.commit()
    page = client.get("/results").text
    assert "Seeds agree" in page and "LOW confidence" in page
