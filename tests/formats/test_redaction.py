"""Secrets are replaced by typed placeholders; ordinary text and ids are left alone."""

import json

import orjson
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


# The audit's misses: (text a tool prints, its type, the parts that must not survive).
PEM_BODY = "MIIEowIBAAKCAQEA7m9Qx1+Zt5VdV3P8Xb0k/aPq2Wc4Lr6Ys8Ne1Jf3Ho7Ui9Tg"
STS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
STS_TOKEN = "FwoGZXIvYXdzEBYaDHqa0AP1/Ex3k+pBziLAAd2Wq8mK7vN0rT4sU6yZ=="
MISSED = {
    "akia": ("AKIAIOSFODNN7EXAMPLE", "aws_access_key_id", ["AKIAIOSFODNN7EXAMPLE"]),
    "ghp": (SECRETS["github_token"], "github_token", [SECRETS["github_token"]]),
    "sk": (SECRETS["openai_api_key"], "openai_api_key", [SECRETS["openai_api_key"]]),
    "password_env": ("PASSWORD=S3cr3t-Pass_1", "password", ["S3cr3t-Pass_1"]),
    "aws_secret_env": (f"AWS_SECRET_ACCESS_KEY={STS_SECRET}", "aws_secret_access_key", [STS_SECRET]),
    "db_password": ("DB_PASSWORD=pg-Hunter2-prod", "password", ["pg-Hunter2-prod"]),
    "client_secret": ("CLIENT_SECRET=cs_9f8e7d6c5b4a", "password", ["cs_9f8e7d6c5b4a"]),
    "my_api_key": ("MY_API_KEY=key-0a1b2c3d4e5f", "password", ["key-0a1b2c3d4e5f"]),
    "pem": (f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n{PEM_BODY[::-1]}\n-----END RSA PRIVATE KEY-----",
            "private_key", [PEM_BODY, PEM_BODY[::-1]]),
    "encrypted_pem": ("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
                      f"DEK-Info: AES-128-CBC,5D1C2E8A3F4B6C7D9E0F1A2B3C4D5E6F\n\n{PEM_BODY}\n"
                      "-----END RSA PRIVATE KEY-----", "private_key", [PEM_BODY, "5D1C2E8A3F4B6C7D9E0F1A2B3C4D5E6F"]),
    "truncated_pem": (f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}\n{PEM_BODY[:20]}... (output truncated)",
                      "private_key", [PEM_BODY, PEM_BODY[:20]]),
    "basic_auth": ("Authorization: Basic dXNlcjpodW50ZXIyLXByb2Q=", "basic_auth", ["dXNlcjpodW50ZXIyLXByb2Q"]),
    "sts_json": (json.dumps({"Credentials": {"AccessKeyId": "ASIAIOSFODNN7EXAMPLE", "SecretAccessKey": STS_SECRET,
                                             "SessionToken": STS_TOKEN}}, indent=2),
                 None, ["ASIAIOSFODNN7EXAMPLE", STS_SECRET, STS_TOKEN]),
}
# How the text sits in a raw rollout line: the secret follows `\n`, `\t`, `\r\n`, `\"`,
# `\u00a0`, a space, the string's own quote, or an escaped newline of a JSON doc in a string.
CONTEXTS = {
    "line_start": lambda t: {"output": f"$ cat .env\n{t}\nexit 0"},
    "after_tab": lambda t: {"output": f"value:\t{t}"},
    "after_crlf": lambda t: {"output": f"C:\\> type creds\r\n{t}\r\n"},
    "after_quote": lambda t: {"output": f'export X="{t}"'},
    "after_unicode_escape": lambda t: {"output": f"\u00a0{t}"},
    "after_space": lambda t: {"output": f"the tool printed {t} and stopped"},
    "string_start": lambda t: {"output": t},
    "nested_json_string": lambda t: {"output": json.dumps({"stdout": f"ok\n{t}\n", "code": 0})},
    "twice_nested": lambda t: {"arguments": json.dumps({"script": json.dumps({"env": f"\n{t}"})})},
}


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("case", MISSED)
def test_secrets_are_caught_wherever_a_raw_line_holds_them(case, context):
    text, kind, parts = MISSED[case]
    line = json.dumps({"response": {"output": [CONTEXTS[context](text)]}, "reward": 1.0}).encode()
    redacted, counts = Redactor().redact(line)
    for part in parts:
        assert part.encode() not in redacted
    assert counts and (kind is None or set(counts) == {kind})
    record = orjson.loads(redacted)  # still JSON, nested documents included
    assert record["reward"] == 1.0
    inner = record["response"]["output"][0]
    if context == "nested_json_string":
        assert orjson.loads(inner["output"])["code"] == 0
    elif context == "twice_nested":
        orjson.loads(orjson.loads(inner["arguments"])["script"])


@pytest.mark.parametrize("escaped_slash", [False, True])
def test_sts_credentials_as_top_level_json_keys(escaped_slash):
    line = json.dumps({"AccessKeyId": "ASIAIOSFODNN7EXAMPLE", "SecretAccessKey": STS_SECRET,
                       "SessionToken": STS_TOKEN, "Expiration": "2024-01-01T00:00:00Z"}).encode()
    if escaped_slash:  # some encoders write `/` as `\/`
        line = line.replace(b"/", b"\\/")
    redacted, counts = Redactor().redact(line)
    assert counts == {"aws_access_key_id": 1, "aws_secret_access_key": 1, "aws_session_token": 1}
    assert orjson.loads(redacted) == {
        "AccessKeyId": "[REDACTED:aws_access_key_id]", "SecretAccessKey": "[REDACTED:aws_secret_access_key]",
        "SessionToken": "[REDACTED:aws_session_token]", "Expiration": "2024-01-01T00:00:00Z"}


@pytest.mark.parametrize(
    "text, kept",
    [
        ("DB_PASSWORD=pg-Hunter2-prod", "DB_PASSWORD=[REDACTED:password]"),
        ("CLIENT_SECRET: cs_9f8e7d6c5b4a", "CLIENT_SECRET: [REDACTED:password]"),
        ("MY_API_KEY='key-0a1b2c3d4e5f'", "MY_API_KEY='[REDACTED:password]'"),
        ("SECRET_KEY=django-insecure-abc123", "SECRET_KEY=[REDACTED:password]"),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic [REDACTED:basic_auth]"),
    ],
)
def test_named_secrets_keep_their_name(text, kept):
    redacted, _ = Redactor().redact(json.dumps({"c": f"env\n{text}\n"}).encode())
    assert orjson.loads(redacted) == {"c": f"env\n{kept}\n"}


def test_a_bare_json_value_under_a_secret_key_becomes_a_string():
    line = b'{"pin_password": 12345678, "is_secret": true, "api_key": null}'
    redacted, counts = Redactor().redact(line)
    assert orjson.loads(redacted) == {"pin_password": "[REDACTED:password]", "is_secret": True, "api_key": None}
    assert counts == {"password": 1}


@pytest.mark.parametrize(
    "text",
    [
        "xAKIAIOSFODNN7EXAMPLE and ghp_" + "x" * 10,  # the literal is the middle of a word
        "tokenAKIAIOSFODNN7EXAMPLE",
        "pipe\n|xAKIAIOSFODNN7EXAMPLE",
        "ask-me-anything-abcdefghijklmnopqrstuvwxyz",
        "max_tokens: 4096\ninput_tokens: 1234",
        "passwd = conn_params.get('passwd')\nuse the password field",
        "old_pwd = os.getcwd()",
        "basic usage: run the basic authorization flow",
        "Authorization: Bearer",
        "SessionToken: null\nsession_token = get_token()",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
        "sha256 3f2a9c7e1b5d4a8f9e0c1d2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b1a2f",
    ],
)
def test_ordinary_text_at_line_starts_is_left_alone(text):
    for wrapped in (f"\n{text}", f"\t{text}", json.dumps({"o": f"\n{text}"})):
        line = json.dumps({"content": wrapped}).encode()
        assert Redactor().redact(line) == (line, {})
