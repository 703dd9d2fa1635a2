"""SSH into RunPod pods: the owner's public keys in Settings are registered on the account
(`PUT /v2/account/ssh-keys`, keeping keys added in RunPod's console), pods created afterwards
get them through startSsh, and the pod card shows the exact ssh command — or says why there
is none. Against the loopback fake, which, like RunPod, gives a pod no SSH access when no key
was registered at its creation."""
from __future__ import annotations

import sqlalchemy as sa

from models import Pod, db
from services.core import settings
from services.dispatch import ssh_keys, watcher
from tests.integration import test_dispatch as base
from tests.integration.test_dispatch import dispatch, pod_spec
from tests.unit.test_ssh_keys import ED25519, PRIVATE_BODY, RSA_1024, RSA_2048

runpod = base.runpod
approved = base.approved
CONSOLE_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILXGDN/SclOozk1xsDztpmhGiKkkrfQB9SKoO8dSIQQZ me@console"
PRIVATE = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PRIVATE_BODY}\n-----END OPENSSH PRIVATE KEY-----"


def save_keys(client, owner, account: str, keys: str):
    return client.post(f"/settings/ssh-keys/{account}", data={"keys": keys, "csrf_token": owner.csrf()})


def puts(fake):
    return fake.requests_to("PUT", "/v2/account/ssh-keys")


def test_saving_keys_registers_them_and_keeps_the_consoles(app, client, owner, runpod):
    """Is a saved key registered on that account only, a key added in RunPod's console kept, the
    fingerprint shown, and an empty save taking Sagan's keys (only) away again?"""
    runpod.ssh_keys["team"] = [CONSOLE_KEY]
    response = save_keys(client, owner, "team", f"{ED25519}\r\n{RSA_2048}\r\n")
    assert response.status_code == 303 and response.headers["Location"].endswith("#ssh-keys")
    assert runpod.ssh_keys["team"] == [CONSOLE_KEY, ED25519, RSA_2048]
    assert runpod.ssh_keys.get("personal") is None
    with app.app_context():
        assert ssh_keys.registered("team") == [ED25519, RSA_2048] and ssh_keys.registered("personal") == []
    page = client.get("/settings").text
    assert "SHA256:cqK7AHqS1EbB/84rVtBZh0CziQjWHX1wEZx6WTQ2S3A" in page and "owner@laptop" in page
    assert "No key registered: pods on this account cannot be reached over SSH." in page  # the personal account

    assert save_keys(client, owner, "team", ED25519).status_code == 303
    assert runpod.ssh_keys["team"] == [CONSOLE_KEY, ED25519]
    assert save_keys(client, owner, "team", "").status_code == 303
    assert runpod.ssh_keys["team"] == [CONSOLE_KEY]
    with app.app_context():
        assert ssh_keys.registered("team") == []


def test_a_private_key_is_refused_never_stored_never_sent_and_never_shown_again(app, client, owner, runpod):
    """A private key pasted by mistake: 422 with the sentence, nothing stored, nothing sent to RunPod,
    and the page does not carry the key back (not even in its own form)."""
    response = save_keys(client, owner, "team", PRIVATE)
    assert response.status_code == 422
    assert ssh_keys.PRIVATE_KEY_REFUSED in response.text
    assert PRIVATE_BODY[:24] not in response.text and "BEGIN OPENSSH PRIVATE KEY" not in response.text
    assert runpod.requests == []
    with app.app_context():
        assert settings.get(ssh_keys.SETTING) is None


def test_a_bad_public_key_is_refused_and_changes_nothing(app, client, owner, runpod):
    """A weak RSA key: 422 naming the line, the typed text back in the form to fix, nothing registered."""
    response = save_keys(client, owner, "team", f"{ED25519}\n{RSA_1024}")
    assert response.status_code == 422 and "Line 2: an RSA key of 1024 bits" in response.text
    assert "owner@laptop</textarea>" in response.text  # what was typed, to be fixed
    assert runpod.requests == []
    with app.app_context():
        assert ssh_keys.registered("team") == []


def test_runpod_refusing_the_keys_saves_nothing(app, client, owner, runpod, monkeypatch):
    """RunPod down (5xx after the retries) or refusing: the reason is shown and nothing is stored."""
    monkeypatch.setitem(app.config, "RUNPOD_MAX_RETRIES", 0)
    runpod.fail_next(1, status=503, method="GET", title="Service Unavailable", detail="try later")
    response = save_keys(client, owner, "team", ED25519)
    assert response.status_code == 422 and "RunPod did not take the keys" in response.text
    assert "nothing was saved" in response.text and puts(runpod) == []
    with app.app_context():
        assert ssh_keys.registered("team") == []


def test_a_stored_key_that_no_longer_reads_is_left_out_of_the_page(app, client, owner, runpod):
    """A settings row edited by hand into something that is not a key: the page still renders (no 500),
    showing the keys that do read."""
    with app.app_context():
        settings.put(ssh_keys.SETTING, {"team": {"keys": ["ssh-ed25519 not-a-key", ED25519]}})
        db.session.commit()
    page = client.get("/settings")
    assert page.status_code == 200 and "SHA256:cqK7AHqS1EbB/84rVtBZh0CziQjWHX1wEZx6WTQ2S3A" in page.text


def test_the_route_knows_only_runpod_accounts_and_the_owner(app, client, owner, runpod):
    """An account that is not team or personal is 404; a post without the CSRF token is refused."""
    assert save_keys(client, owner, "local", ED25519).status_code == 404
    assert client.post("/settings/ssh-keys/team", data={"keys": ED25519}).status_code == 400
    assert runpod.requests == []


def _card(client, number) -> str:
    page = client.get(f"/experiments/{number}").text
    start = page.index('<section class="panel" id="pods">')
    return page[start:page.index("</section>", start)]


def test_a_pod_card_shows_the_ssh_command_when_a_key_was_registered(app, client, owner, runpod, approved,
                                                                   api_client):
    """Key registered, then a pod dispatched: RunPod gave the pod the key (startSsh), and once it runs
    the card shows the exact command from RunPod's ssh block (user, host, port); the API says it too."""
    assert save_keys(client, owner, "team", ED25519).status_code == 303
    number = approved(pod_spec())
    run_id = dispatch(app, number)
    runpod.advance(120)
    with app.app_context():
        watcher.watch()
        pod = db.session.scalar(sa.select(Pod).where(Pod.agent_run_id == run_id))
        assert pod.metadata_["ssh_keys"] == 1 and (pod.ssh_user, pod.ssh_host, pod.ssh_port) == (
            "root", "203.0.113.10", 10341)
        provider_id = pod.provider_pod_id
    assert runpod.pods[provider_id].public_keys == [ED25519]
    assert runpod.requests_to("POST", "/v2/pods")[0].body["startSsh"] is True
    card = _card(client, number)
    assert '<code class="ssh-command">ssh root@203.0.113.10 -p 10341</code>' in card
    assert "direct to the pod&#39;s public IP" in card
    listed = api_client("read").get(f"/api/experiments/{number}/pods").get_json()["pods"][0]
    assert listed["sshCommand"] == "ssh root@203.0.113.10 -p 10341" and listed["sshUser"] == "root"


def test_a_key_added_in_runpods_console_counts_too(app, client, owner, runpod, approved):
    """The owner registered a key in RunPod's console, none in Sagan: the pod gets it, so its card shows
    the command (what counts is what the account held when the pod was made, read from RunPod)."""
    runpod.ssh_keys["team"] = [CONSOLE_KEY]
    number = approved(pod_spec())
    run_id = dispatch(app, number)
    runpod.advance(120)
    with app.app_context():
        watcher.watch()
        pod = db.session.scalar(sa.select(Pod).where(Pod.agent_run_id == run_id))
        assert pod.metadata_["ssh_keys"] == 1 and ssh_keys.registered("team") == []
        provider_id = pod.provider_pod_id
    assert runpod.pods[provider_id].public_keys == [CONSOLE_KEY]
    assert '<code class="ssh-command">ssh root@203.0.113.10 -p 10341</code>' in _card(client, number)


def test_a_pod_card_says_no_key_registered_when_there_is_none(app, client, owner, runpod, approved):
    """No key on the account: the pod has no SSH access (startSsh did nothing), so the card shows no
    command but says why and where to fix it; a key registered later does not reach that pod."""
    number = approved(pod_spec())
    run_id = dispatch(app, number)
    runpod.advance(120)
    with app.app_context():
        watcher.watch()
        provider_id = db.session.scalar(sa.select(Pod.provider_pod_id).where(Pod.agent_run_id == run_id))
    assert runpod.pods[provider_id].public_keys == []
    card = _card(client, number)
    assert "ssh-command" not in card and "ssh root@" not in card
    assert "SSH: <span class=\"muted\">no key registered for the team account — add your public key in " \
           "Settings → SSH keys</span>" in card
    assert save_keys(client, owner, "team", ED25519).status_code == 303
    assert runpod.pods[provider_id].public_keys == []  # running pods are not updated
    card = _card(client, number)
    assert "ssh-command" not in card and "no key registered when this pod was created" in card
