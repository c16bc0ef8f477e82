"""Secrets are replaced by typed placeholders; ordinary text and ids are left alone."""

import json

import pytest

from trajectory_assets.formats.redaction import Redactor

SECRETS = {
    "openai_api_key": "sk-proj-Abc123def456Ghi789jkl012mno345",
    "anthropic_api_key": "sk-ant-api03-Abc123def456Ghi789jkl012",
    "aws_access_key_id": "AKIAIOSFODNN7EXAMPLE",
    "github_token": "ghp_Abc123def456Ghi789jkl012mno345pqr678",
    "slack_token": "xoxb-123456789012-Abcdefghij",
    "stripe_key": "sk_live_Abc123def456Ghi789jk",
    "google_api_key": "AIzaSyA-abcdefghijklmnopqrstuvwxyz12345",
    "huggingface_token": "hf_Abc123def456Ghi789jkl012mno345pq",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
}


@pytest.mark.parametrize("kind, secret", SECRETS.items())
def test_each_token_type_is_replaced_and_counted(kind, secret):
    line = json.dumps({"content": f"the tool printed {secret} and stopped"}).encode()
    redacted, counts = Redactor().redact(line)
    assert secret.encode() not in redacted
    assert counts == {kind: 1}
    assert json.loads(redacted) == {"content": f"the tool printed [REDACTED:{kind}] and stopped"}


@pytest.mark.parametrize(
    "text, kind, kept",
    [
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key",
         "aws_secret_access_key = "),
        ("Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123", "bearer_token", "Authorization: Bearer "),
        ("postgres://admin:hunter2@db.internal:5432/app", "url_password", "postgres://admin:"),
        ("PASSWORD=S3cr3t-Pass_1", "password", "PASSWORD="),
        ('{"api_key": "abcd1234efgh"}', "password", '{"api_key": "'),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----", "private_key", ""),
    ],
)
def test_secrets_in_context_keep_their_context(text, kind, kept):
    line = json.dumps({"content": text}).encode()  # in JSON, as in a rollout line
    redacted, counts = Redactor().redact(line)
    assert counts == {kind: 1}
    content = json.loads(redacted)["content"]
    assert f"[REDACTED:{kind}]" in content and content.startswith(kept)


@pytest.mark.parametrize(
    "text",
    [
        "sha256 3f2a9c7e1b5d4a8f9e0c1d2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b1a2f",
        "uuid 123e4567-e89b-12d3-a456-426614174000 and task-abcdefghijklmnopqrstuvwxyz012345",
        "passwd = conn_params.get('passwd')",
        "use the password field of the form",
        "see https://example.com/docs and http://localhost:8000/path",
        "input_tokens: 1234, secret garden",
        "mail bob@example.com",  # e-mails only when asked for
    ],
)
def test_ordinary_text_is_left_alone(text):
    line = json.dumps({"content": text}).encode()
    assert Redactor().redact(line) == (line, {})


def test_emails_on_request():
    redacted, counts = Redactor(emails=True).redact(b'{"c": "write to bob.smith@example.com"}')
    assert redacted == b'{"c": "write to [REDACTED:email]"}' and counts == {"email": 1}


def test_many_secrets_in_one_record_all_go():
    line = json.dumps({"a": [SECRETS["github_token"], {"b": SECRETS["jwt"]}], "c": "x " + SECRETS["openai_api_key"]})
    redacted, counts = Redactor().redact(line.encode())
    assert sum(counts.values()) == 3
    assert not any(secret.encode() in redacted for secret in SECRETS.values())
    json.loads(redacted)  # still valid JSON
