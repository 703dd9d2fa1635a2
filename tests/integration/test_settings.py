"""The settings page: GPU prices and the auto-approve limit drive estimates."""
from __future__ import annotations

from services import settings
from services.dispatch import costs


def test_prices_saved_and_used_in_estimates(app, client, owner):
    """Does a saved H200 price make estimates for H200 known?"""
    response = client.post("/settings/pricing", data={"price-H200": "3.50", "auto_approve_max_usd": "25",
                                                      "csrf_token": owner.csrf()})
    assert response.status_code == 303
    with app.app_context():
        assert settings.gpu_prices()["H200"] == 3.5
        assert settings.get("auto_approve_max_usd") == 25.0
        estimate = costs.estimate([{"gpuType": "H200", "gpuCount": 2, "estimatedMinutes": 60}],
                                  settings.gpu_prices())
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
        estimate = costs.estimate([{"gpuType": "L40S", "estimatedMinutes": 60}], settings.gpu_prices())
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
