"""The owner's SSH public keys (services/dispatch/ssh_keys.py): each key checked down to its wire format,
private keys refused without being repeated, and the pod card's ssh command built from parts
that are plain names. The keys below were made with `ssh-keygen` for these tests (public halves
only; their fingerprints are what `ssh-keygen -l` printed)."""
from __future__ import annotations

import base64
import struct

import pytest

from services.core.errors import ValidationError
from services.dispatch import ssh_keys

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIQSzszplkRyoTdDN09KihOHa404FAuCSQGvxSny391l owner@laptop"
ECDSA_256 = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBI2VLko9oD/ZNVImko7EHMQY8tgLxgS"
             "st6vBCG4AMJdyzQicdzFamaG+L/iapZqsRons619NI3zK0w1GFOx88Qk= owner@laptop")
ECDSA_521 = ("ecdsa-sha2-nistp521 AAAAE2VjZHNhLXNoYTItbmlzdHA1MjEAAAAIbmlzdHA1MjEAAACFBADWfbOaUb3OxG9MEfr9NztVo0r7cUZ"
             "m+ir3B3pkQbQGUipw8fu6k4VhcGD4+FK5zBStaMWgxbgoUQrOWloexHZIbwEdIdZZAtX77JbqBv9PHMVt67gee+VFhwfmvBEiLIQl5SU+"
             "8ALzVcwgp7yBrBoK9aelmhAQEpVVuF9FecjRdZXnhQ== owner@laptop")
RSA_2048 = ("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCzglwpF92kVZ9sQE3kQhfS+W6fYh1t9Hu8WiTxjVXYbOS9NjniNPEY6uZVZQ0UCgZQFWkz"
            "goTFu5crw/l3zYRV8auJb0CElLRVKRlfC/S6z40akm6sJd2avXnpq4sl6sId4Ne220YHyoxX1AcGBqKxiFf/hCFW78IhqnxYUdwVUE9znMP"
            "pLMhVd+/daPmyDps3qu77rsEl/0Q6YRxD9CIzlWM7IaAL9w8g73B8oKZWGPXcqJwOGN1mgO8tq0YTkCf0tqciU/YuuEhfw8N8L6XlHEnbf9"
            "WPbHycX1mfqYgDas1vNvBYkoGAd7F4ekJ7f6kmpbM4PisK+rotB29Om7B9 owner@laptop")
RSA_1024 = ("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQC5RytQC1xXaBJZhYnv6pqvbiWLszwRZdbdUbV2LT2O7zPGk0tGdG2c8pLRrWqn0+f1nio"
            "4dRDjEroNpRbFb9ZzL7AF1wPon7358HT2M9yBHADbsMoGHW2vokaa6KHLhyGUR+XfyYO8HYBuYSNQFZ1NMgewurG4EEU8uFQGfkZ83Q== "
            "owner@laptop")
PRIVATE_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"


def _blob(*fields: bytes) -> str:
    return base64.b64encode(b"".join(struct.pack(">I", len(f)) + f for f in fields)).decode()


def refusal(text: str) -> str:
    with pytest.raises(ValidationError) as caught:
        ssh_keys.parse_keys(text)
    return caught.value.message


def test_real_public_keys_of_each_type_are_read_with_their_fingerprints():
    """Do ed25519, ECDSA (256, 521) and RSA 2048 keys from ssh-keygen pass, keeping type, comment,
    the line as given, and the fingerprint ssh-keygen prints?"""
    keys = ssh_keys.parse_keys(f"{ED25519}\n\n  {ECDSA_256}  \n{ECDSA_521}\n{RSA_2048}\n")
    assert [k.kind for k in keys] == ["ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp521", "ssh-rsa"]
    assert [k.line for k in keys] == [ED25519, ECDSA_256, ECDSA_521, RSA_2048]
    assert keys[0].comment == "owner@laptop"
    assert keys[0].fingerprint == "SHA256:cqK7AHqS1EbB/84rVtBZh0CziQjWHX1wEZx6WTQ2S3A"
    assert keys[3].fingerprint == "SHA256:ExACTZbcRR9P9tHzU9p/lcHTisuHOxY0ewKlXPT3FBA"
    assert ssh_keys.parse_keys("") == [] and ssh_keys.parse_keys("\n \n") == []


def test_a_security_key_is_read_too():
    """A FIDO key (sk-ssh-ed25519@openssh.com: type, 32-byte key, application) passes."""
    kind = "sk-ssh-ed25519@openssh.com"
    (key,) = ssh_keys.parse_keys(f"{kind} {_blob(kind.encode(), bytes(range(32)), b'ssh:')}")
    assert key.kind == kind and key.comment == ""


@pytest.mark.parametrize("text", [
    f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PRIVATE_BODY}\n-----END OPENSSH PRIVATE KEY-----",
    f"-----BEGIN RSA PRIVATE KEY-----\n{PRIVATE_BODY}\n-----END RSA PRIVATE KEY-----",
    f"PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPublic-Lines: 2\n{PRIVATE_BODY}",
    f"{ED25519}\n-----BEGIN PRIVATE KEY-----\n{PRIVATE_BODY}",
])
def test_a_private_key_is_refused_without_being_repeated(text):
    """Is an OpenSSH, PEM or PuTTY private key (even after a good public key) refused with a sentence
    saying to paste the .pub line — and is none of the key in that sentence?"""
    message = refusal(text)
    assert message == ssh_keys.PRIVATE_KEY_REFUSED
    assert PRIVATE_BODY[:20] not in message and "b3BlbnNzaC1rZXk" not in message
    assert ssh_keys.looks_private(text)


@pytest.mark.parametrize("text, words", [
    (RSA_1024, "Line 1: an RSA key of 1024 bits; use at least 2048"),
    ("ssh-ed25519", "Line 1 has the key type but no key after it."),
    ("ssh-ed25519 AAAAC3Nza!!notbase64 me", "Line 1: the key after ssh-ed25519 is not valid base64"),
    (f"ssh-ed25519 {ED25519.split()[1][:40]}", "Line 1: the ssh-ed25519 key is cut short or malformed"),
    (f"ssh-ed25519 {ED25519.split()[1][:41]}", "Line 1: the key after ssh-ed25519 is not valid base64"),
    ("ssh-ed25519 " + _blob(b"ssh-ed25519", bytes(31)), "Line 1: the ssh-ed25519 key has the wrong size"),
    ("ssh-ed25519 " + _blob(b"ssh-ed25519", bytes(32))[:-8] + "AAAAAAA=", "is cut short or malformed"),
    ("ssh-rsa " + ED25519.split()[1], "Line 1: the key inside is not an ssh-rsa key (it says 'ssh-ed25519')"),
    ("ecdsa-sha2-nistp384 " + ECDSA_256.split()[1], "not an ecdsa-sha2-nistp384 key"),
    ("ssh-dss AAAAB3NzaC1kc3MAAACBAP", "Line 1 starts with 'ssh-dss', not a public key type"),
    ('from="10.0.0.1" ' + ED25519, "authorized_keys options such as from=… are not accepted"),
    ("---- BEGIN SSH2 PUBLIC KEY ----", "RFC 4716 (SSH2) public key: convert it"),
    (ED25519.replace("owner@laptop", "owner\x07laptop"), "the comment after the key must be one line"),
    (f"{ED25519}\n{RSA_2048}\n{ED25519.replace('owner@laptop', 'again')}", "Line 3 repeats the key on line 1."),
    ("\n".join([ED25519] * 11), "At most 10 keys per account; 11 were given."),
    ("ssh-rsa " + "A" * 9000, "Line 1 is 9,008 characters; a public key line is at most 8,192."),
])
def test_what_is_not_a_good_public_key_is_refused_naming_the_line(text, words):
    """Is a weak, cut, mislabelled, unknown, optioned, RFC 4716, repeated or oversized key refused with
    a sentence naming its line and what is wrong?"""
    assert words in refusal(text)


def test_the_ssh_command_is_built_from_plain_parts_only():
    """`ssh user@host -p port` (no -p for 22, root by default); a user or host that is not a plain name
    (it is pasted into a shell) gives no command at all."""
    assert ssh_keys.ssh_command("root", "203.0.113.10", 10341) == "ssh root@203.0.113.10 -p 10341"
    assert ssh_keys.ssh_command("abc123-64410f2e", "ssh.runpod.io", 22) == "ssh abc123-64410f2e@ssh.runpod.io"
    assert ssh_keys.ssh_command(None, "203.0.113.10", None) == "ssh root@203.0.113.10"
    for user, host, port in [("root;rm", "h.example", 22), ("root", "h.example;id", 22), ("root", "-oProxy=x", 22),
                             ("root", "h.example", 70000), ("$(id)", "h.example", 22), ("root", "", 22)]:
        assert ssh_keys.ssh_command(user, host, port) is None, (user, host, port)
