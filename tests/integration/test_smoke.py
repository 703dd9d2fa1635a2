"""First smoke checks that the harness works end to end."""


def test_login_page_renders(client):
    """Does the login page answer 200 with a CSRF-protected form?"""
    response = client.get("/login")
    assert response.status_code == 200
    assert 'name="csrf_token"' in response.text


def test_board_after_login_shows_new_experiment(client, owner, make_experiment):
    """Does a created experiment appear on the board in the Ideas column?"""
    number = make_experiment("Warmup length vs loss spike")
    response = client.get("/board")
    assert response.status_code == 200
    assert f"#{number}" in response.text and "Warmup length vs loss spike" in response.text
