"""Redaction measured both ways: every planted secret goes, every look-alike stays.

The corpora are in tests/fixtures/secrets.py; here each planted secret is put in every place
a rollout holds text (NeMo Gym and Hermes), written by three JSON encoders, and each
look-alike likewise.
"""

import json
import re

import orjson
import pytest
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

from tests.fixtures.secrets import (
    ALNUM, AWS_SECRET, GITHUB_PAT, JWT, LOOKALIKE_NAMES, LOOKALIKES, PLANTED, POSITIONS, STS_KEY_ID, STS_SECRET,
    STS_TOKEN, URLSAFE, JWT_HS, all_positions, b64url_json, planted, rand,
)
from tests.conftest import CORPUS
from trajectory_assets.redaction import redactor as redaction
from trajectory_assets.redaction import secret_rules as rules
from trajectory_assets.redaction.redactor import (
    AFTER, AhoCorasickPrefilter, HyperscanPrefilter, Redactor, check_rules, required_literals, rule_problem,
)
from trajectory_assets.config import ConfigError, RedactionConfig
from trajectory_assets.sources import convert_record

REDACTOR = Redactor()
ENCODERS = {
    "json": lambda row: json.dumps(row).encode(),  # ASCII, non-ASCII as \uXXXX
    "utf8": lambda row: json.dumps(row, ensure_ascii=False).encode(),  # as Hermes writes
    "escaped_slash": lambda row: json.dumps(row).replace("/", "\\/").encode(),  # as some encoders write
}


def every_line(text: str):
    for position, row in all_positions(text).items():
        for encoder, encode in ENCODERS.items():
            yield f"{position}/{encoder}", encode(row)


def survives(secret: str, line: bytes) -> bool:
    return secret.encode() in line or secret.replace("/", "\\/").encode() in line


@pytest.mark.parametrize("case", PLANTED, ids=[case.name for case in PLANTED])
def test_every_planted_secret_goes_from_every_place(case):
    missed = []
    for where, line in every_line(case.text):
        redacted, counts = REDACTOR.redact(line)
        record = orjson.loads(redacted)  # still JSON
        convert_record(redacted, source_id="s.jsonl")  # and still the same rollout to the converter
        assert isinstance(record, dict)
        left = [secret[:12] for secret in case.secrets if survives(secret, redacted)]
        if left or not case.kinds <= set(counts):
            missed.append(f"{where}: left {left}, counted {dict(counts)}")
    assert not missed, f"{case.name} (expected {sorted(case.kinds)}):\n" + "\n".join(missed)


@pytest.mark.parametrize("name", LOOKALIKE_NAMES)
def test_no_lookalike_is_altered(name):
    altered = [f"{where}: {[(f.kind, line[f.start:f.end]) for f in REDACTOR.findings(line)]}"
               for where, line in every_line(LOOKALIKES[name]) if REDACTOR.redact(line)[0] != line]
    assert not altered, "\n".join(altered)


def test_the_corpora_cover_what_the_issue_names():
    kinds = {kind for case in PLANTED for kind in case.kinds}
    assert {
        "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "google_api_key", "azure_storage_key",
        "github_token", "gitlab_token", "npm_token", "pypi_token", "slack_token", "stripe_key", "openai_api_key",
        "anthropic_api_key", "huggingface_token", "jwt", "private_key", "url_password",
        "token", "password", "secret", "api_key", "bearer_token", "basic_auth",
    } <= kinds
    assert {"github_fine_grained", "aws_sts_json", "env_file", "shell_export", "json_config", "yaml_config",
            "api_key_header", "bearer_header"} <= {case.name for case in PLANTED}
    assert {"tool_output", "tool_call_arguments", "user_message", "system_message", "reasoning", "assistant_answer",
            "hermes_tool_call", "hermes_tool_response", "hermes_human", "hermes_system", "hermes_reasoning",
            "hermes_assistant"} <= set(POSITIONS)
    # the three kinds a new-user test found passing through, each in several shapes
    assert {"url_password_at_sign", "url_password_dollar", "url_password_prose", "jwt_in_prose", "jwt_quoted",
            "jwt_end_of_sentence", "jwt_longer_than_a_window", "huggingface_digits", "huggingface_digits_code",
            "huggingface_org_digits"} <= {case.name for case in PLANTED}
    assert {"url_placeholders", "jwt_payload_not_json", "jwt_header_not_json", "signed_cookie", "jwt_docs",
            "base64_json_cursors", "base64_blob_with_eyj", "hf_identifiers", "hf_placeholders"} <= set(LOOKALIKE_NAMES)
    assert {"python_kwargs", "docstring", "passwd_prompts", "hashes", "uuids", "placeholder_env",
            "base64_image", "long_identifiers", "value_error"} <= set(LOOKALIKE_NAMES)


# -- the issue's own examples -------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "run(host, user=user, password=password)",
    "password: Optional ssh password for login to the server",
    "New password: Retype new password:",
    "export OPENAI_API_KEY=<your-api-key-here>",
    'raise ValueError("SECRET_KEY must be set")',
])
def test_the_false_positives_of_the_issue_stay(text):
    line = json.dumps({"content": text}).encode()
    assert REDACTOR.redact(line) == (line, {})


@pytest.mark.parametrize("text, secret, kind", [
    ("git clone https://oauth2:glpat-Zr8x2Lq9Vb3Nc5Tm7Kd1@gitlab.com/a/b.git", "glpat-Zr8x2Lq9Vb3Nc5Tm7Kd1",
     "gitlab_token"),
    ("NPM_TOKEN=npm_Q2w8Er4Ty6Ui1Op3As5Df7Gh9Jk0Lz2Xc4Vb", "npm_Q2w8Er4Ty6Ui1Op3As5Df7Gh9Jk0Lz2Xc4Vb", "npm_token"),
    ("DEPLOY_TOKEN=k3F9q2Lx7Vb1Nm8Zr4Tc6Yh0Wd5Sa2Pe", "k3F9q2Lx7Vb1Nm8Zr4Tc6Yh0Wd5Sa2Pe", "token"),
])
def test_the_misses_of_the_issue_are_caught(text, secret, kind):
    redacted, counts = REDACTOR.redact(json.dumps({"content": f"$ cat .env\n{text}\n"}).encode())
    assert secret.encode() not in redacted and counts[kind] == 1


# -- replacement ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text, kept", [
    (f"DB_PASSWORD={AWS_SECRET[:20]}x9", "DB_PASSWORD=[REDACTED:password]"),
    (f"export AWS_SECRET_ACCESS_KEY='{AWS_SECRET}'", "export AWS_SECRET_ACCESS_KEY='[REDACTED:aws_secret_access_key]'"),
    (f"Authorization: Bearer {GITHUB_PAT}", "Authorization: Bearer [REDACTED:github_token]"),
    (f"client_secret: {STS_SECRET}", "client_secret: [REDACTED:secret]"),
    (f"https://user:{GITHUB_PAT[4:20]}@host/x", "https://user:[REDACTED:url_password]@host/x"),
])
def test_a_secret_is_replaced_and_its_context_kept(text, kept):
    redacted, _ = REDACTOR.redact(json.dumps({"c": f"env\n{text}\n"}).encode())
    assert orjson.loads(redacted) == {"c": f"env\n{kept}\n"}


def test_sts_credentials_as_keys_of_the_line_itself():
    line = json.dumps({"AccessKeyId": STS_KEY_ID, "SecretAccessKey": STS_SECRET, "SessionToken": STS_TOKEN,
                       "Expiration": "2026-01-01T00:00:00Z"}).replace("/", "\\/").encode()
    redacted, counts = REDACTOR.redact(line)
    assert counts == {"aws_access_key_id": 1, "aws_secret_access_key": 1, "aws_session_token": 1}
    assert orjson.loads(redacted) == {
        "AccessKeyId": "[REDACTED:aws_access_key_id]", "SecretAccessKey": "[REDACTED:aws_secret_access_key]",
        "SessionToken": "[REDACTED:aws_session_token]", "Expiration": "2026-01-01T00:00:00Z"}


def test_a_json_number_or_boolean_under_a_secret_name_is_no_credential():
    line = b'{"pin_password": 12345678, "is_secret": true, "api_key": null}'
    assert REDACTOR.redact(line) == (line, {})


def test_secrets_longer_than_the_window_are_replaced_whole():
    long_jwt = JWT.rsplit(".", 1)[0] + "." + rand(URLSAFE, 2 * AFTER)
    # an access token with many claims: its payload alone is longer than a window
    claims = b64url_json({"sub": "ada", "scp": [rand(ALNUM, 20) for _ in range(4 * AFTER // 20)]})
    long_payload = JWT.split(".", 1)[0] + "." + claims + "." + rand(URLSAFE, 342)
    long_value = rand(ALNUM, 2 * AFTER)
    for text, secret in ((f"token {long_jwt} end", long_jwt), (f"the token is {long_payload} end", long_payload),
                         (f"SECRET={long_value} end", long_value)):
        redacted, counts = REDACTOR.redact(json.dumps({"c": text}).encode())
        assert orjson.loads(redacted)["c"].endswith(" end") and len(counts) == 1
        assert secret[-20:].encode() not in redacted


@pytest.mark.parametrize("filler", ["aws key ", "-us", "password: ", "://a:", "T3BlbkFJ "])
def test_a_secret_among_thousands_of_its_literals_is_found(filler):
    """Windows are shared and searched once per rule: none of that may lose a finding."""
    mailchimp = rand("0123456789abcdef", 32) + "-us14"
    secrets = {"aws_secret_access_key": AWS_SECRET, "mailchimp_key": mailchimp, "token": rand(ALNUM, 32)}
    text = (filler * 3000 + f" aws_secret_access_key = '{AWS_SECRET}' " + filler * 3000 + f" {mailchimp} "
            + filler * 3000 + f"\nDEPLOY_TOKEN={secrets['token']}\n" + filler * 3000)
    redacted, counts = REDACTOR.redact(json.dumps({"c": text}).encode())
    assert all(secret.encode() not in redacted for secret in secrets.values())
    assert set(secrets) <= set(counts)


def test_overlapping_findings_become_one_placeholder():
    # the assignment rule and the AWS format both find this value: one placeholder, the format's type
    redacted, counts = REDACTOR.redact(json.dumps({"c": f"aws_secret_access_key = '{AWS_SECRET}'"}).encode())
    assert counts == {"aws_secret_access_key": 1}
    assert orjson.loads(redacted) == {"c": "aws_secret_access_key = '[REDACTED:aws_secret_access_key]'"}


def test_non_ascii_around_a_secret_stays_valid_utf8():
    line = json.dumps({"c": f"clé→{GITHUB_PAT}←ok"}, ensure_ascii=False).encode()
    redacted, counts = REDACTOR.redact(line)
    assert counts == {"github_token": 1}
    assert json.loads(redacted.decode("utf-8")) == {"c": "clé→[REDACTED:github_token]←ok"}


def test_a_broken_line_is_redacted_too():
    line = f'not json {GITHUB_PAT} "unterminated'.encode()
    assert REDACTOR.redact(line)[0] == b'not json [REDACTED:github_token] "unterminated'


def test_emails_on_request():
    line = b'{"c": "write to bob.smith@example.com"}'
    assert REDACTOR.redact(line) == (line, {})
    redacted, counts = Redactor(emails=True).redact(line)
    assert redacted == b'{"c": "write to [REDACTED:email]"}' and counts == {"email": 1}


# -- the prefilter ----------------------------------------------------------------------------------
def sample_lines() -> list[bytes]:
    lines = [line for case in PLANTED for _, line in every_line(case.text)]
    lines += [line for name in LOOKALIKE_NAMES for _, line in every_line(LOOKALIKES[name])]
    lines += [line for path in sorted(CORPUS.rglob("*.jsonl")) for line in path.read_bytes().split(b"\n")]
    return lines


@pytest.mark.skipif(redaction.hyperscan is None, reason="hyperscan has no wheel for this machine's architecture, "
                                                        "so only the Aho-Corasick prefilter can run here")
def test_both_prefilters_find_the_same_literals():
    literals = REDACTOR._literals
    fast, fallback = HyperscanPrefilter(literals), AhoCorasickPrefilter(literals)
    hits = 0
    for line in sample_lines():
        found = sorted(fast.hits(line))
        assert found == sorted(fallback.hits(line))
        hits += len(found)
    assert hits > 1000


def test_the_aho_corasick_prefilter_redacts_alike(monkeypatch):
    monkeypatch.setattr(redaction, "PREFILTER", AhoCorasickPrefilter)
    fallback = Redactor()
    assert isinstance(fallback._prefilter, AhoCorasickPrefilter)
    for line in sample_lines():
        assert fallback.redact(line) == REDACTOR.redact(line)


# -- users' own rules -----------------------------------------------------------------------------
def test_allowlist_keeps_a_secret_it_matches_in_full():
    line = json.dumps({"c": f"use {GITHUB_PAT} and {JWT}"}).encode()
    redacted, counts = Redactor(allowlist=[re.escape(GITHUB_PAT), "ghp_"]).redact(line)
    assert GITHUB_PAT.encode() in redacted and counts == {"jwt": 1}  # `ghp_` alone matches no secret in full


def test_extra_rules_replace_in_house_tokens():
    redactor = Redactor(extra_rules={"acme_token": r"acme_(?:live|test)_[A-Za-z0-9]{16}",
                                     "acme_pin": r"ACME-PIN: (?P<secret>\d{6})"})
    line = json.dumps({"c": "key acme_live_0123456789abcdef\nACME-PIN: 123456"}).encode()
    redacted, counts = redactor.redact(line)
    assert counts == {"acme_token": 1, "acme_pin": 1}
    assert orjson.loads(redacted) == {"c": "key [REDACTED:acme_token]\nACME-PIN: [REDACTED:acme_pin]"}
    assert "2 extra rule(s)" in redactor.detector


@pytest.mark.parametrize("pattern, problem", [
    ("acme_[", "not a valid regex"),
    ("acme_ü[0-9]{8}", "non-ASCII"),
    ("x*", "matches empty text"),
    (r"[A-Z]{3}-\d{6}", "no literal"),
])
def test_a_user_rule_the_prefilter_cannot_find_is_refused(pattern, problem):
    assert problem in rule_problem(pattern)


@pytest.mark.parametrize("rules, message", [
    ({"Acme Token": "acme_[a-z]{8}"}, "redaction.extra_rules: rule name 'Acme Token' must be lowercase"),
    ({"acme": "[A-Z]{3}-[0-9]{6}"}, "redaction.extra_rules.acme '[A-Z]{3}-[0-9]{6}' has no literal"),
    ({"acme": "acme_(x"}, "not a valid regex"),
    ({"acme": "(acme_)?"}, "matches empty text"),
])
def test_the_config_s_rules_are_checked_where_they_are_used(rules, message):
    """The config loads (every asset reads it); the redactor refuses the rule, naming it."""
    config = RedactionConfig(extra_rules=rules)
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_rules(config)
    with pytest.raises(ConfigError, match=re.escape(message)):
        Redactor.from_config(config)
    check_rules(RedactionConfig(extra_rules={"acme_token": "acme_[a-z0-9]{32}"}))


# -- built on detect-secrets ----------------------------------------------------------------------
def test_every_detect_secrets_plugin_runs_or_is_listed_with_its_reason():
    plugins = {cls.__name__ for cls in get_mapping_from_secret_type_to_class().values()}
    running = {cls.__name__ for cls in rules.PLUGINS}
    assert running | set(rules.PLUGINS_NOT_RUN) == plugins and not running & set(rules.PLUGINS_NOT_RUN)


def test_every_regex_of_a_running_plugin_is_prefiltered_or_listed():
    unfiltered, grouped = set(), set()
    for plugin in rules.PLUGINS:
        for index, regex in enumerate(plugin.denylist):
            if required_literals(regex) is None:
                unfiltered.add((plugin.__name__, index))
            elif regex.groups:
                grouped.add((plugin, index))
    assert unfiltered == rules.UNFILTERABLE_PLUGIN_REGEXES
    # where a regex captures, the group is the secret or a part of the token: decided for each
    assert grouped == rules.PLUGIN_SECRET_IN_GROUP | rules.PLUGIN_GROUP_IN_TOKEN


def test_the_detector_names_its_version():
    from importlib.metadata import version

    assert REDACTOR.detector == f"detect-secrets {version('detect-secrets')} with trajectory-assets rules"


@pytest.mark.parametrize("pattern, literals, prefix", [
    (r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}", {"A3T", "ABIA", "ACCA", "AKIA", "ASIA"}, True),
    (r"(glpat|gldt)-[A-Za-z0-9_\-]{20,50}(?!\w)", {"glpat-", "gldt-"}, True),
    (r"secret[-_]?key", {"secretkey", "secret-key", "secret_key"}, True),
    (r"[0-9a-z]{32}-us[0-9]{1,2}", {"-us"}, False),
    (r"sk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}", {"T3BlbkFJ"}, False),
])
def test_prefilter_literals_come_from_the_regex(pattern, literals, prefix):
    assert required_literals(re.compile(pattern)) == (frozenset(literals), prefix)


@pytest.mark.parametrize("pattern", [r"\w+@\w+", r"[A-Z]{2}\d{8}", r"(?:ab|cd)\d+"])
def test_a_regex_without_a_long_enough_literal_has_none(pattern):
    assert required_literals(re.compile(pattern)) is None


# -- what a credential looks like -------------------------------------------------------------------
@pytest.mark.parametrize("value, reason", [
    ("k3F9q2Lx7Vb1Nm8Zr4Tc6Yh0Wd5Sa2Pe", None),
    ("S3cr3t-Pass_1", None),
    ("cs_9f8e7d6c5b4a", None),
    ("Tr0ub4dor&3x", None),
    ("password", "word"),
    ("db_password_from_vault", "word"),
    ("ThisIsAVeryLongIdentifierName", "word"),
    ("OPENAI_API_KEY", "word"),
    ("Hunter2-prod", "word"),
    ("hunter2", "short"),
    ("12345678", "no_letter"),
    ("os.environ[", "expression"),
    ("bcrypt.hashpw(password,", "expression"),
    ("${DB_PASSWORD}", "reference"),
    ("%(api_key)s", "template"),
    ("$API_KEY", "reference"),
    ("<your-api-key>", "reference"),
    ("{{vault_token}}", "reference"),
    ("xxxxxxxxxxxxxxxx", "gitleaks_allowlist"),
    ("%DB_PASSWORD%", "gitleaks_allowlist"),
    ("your_key_123456", "placeholder"),
    ("AKIAIOSFODNN7EXAMPLE", "placeholder"),
    ("sk-...a1b2c3d4", "template"),
    ("abcdefghijklmnopqrstuvwxyz0123", "sequential"),
    ("sha256:9f86d081884c7d659a2feaa0c55ad015", "labelled_hash"),
    ("123e4567-e89b-12d3-a456-426614174000", "uuid"),
    ("/run/secrets/db_password", "path"),
    ("aaaa1111bbbb2222", "low_entropy"),
])
def test_credential_reason(value, reason):
    assert rules.credential_reason(value) == reason


@pytest.mark.parametrize("name, kind", [
    ("DB_PASSWORD", "password"), ("passwd", "password"), ("PGPASS", None), ("db_pass", "password"),
    ("clientSecret", "secret"), ("SECRET_KEY", "secret"), ("x-api-key", "api_key"), ("apiKey", "api_key"),
    ("OPENAI_API_KEY", "api_key"), ("DEPLOY_TOKEN", "token"), ("access_token", "token"),
    ("AWS_SECRET_ACCESS_KEY", "aws_secret_access_key"), ("SecretAccessKey", "aws_secret_access_key"),
    ("SessionToken", "aws_session_token"), ("AWS_SESSION_TOKEN", "aws_session_token"), ("auth", "credential"),
    ("password_hash", None), ("max_tokens", None), ("tokenizer", None), ("api_key_id", None), ("secret_name", None),
    ("nextPageToken", None), ("monkey", None), ("primary_key", None), ("author", None), ("bypass", None),
])
def test_secret_name_type(name, kind):
    assert rules.secret_name_type(name) == kind


def test_planted_helper_normalises_its_arguments():
    case = planted("x", "t", "s", "k")
    assert case.secrets == ("s",) and case.kinds == frozenset({"k"})


# -- passwords in URLs ----------------------------------------------------------------------------
GO_ESCAPES = {b"&": b"\\u0026", b"<": b"\\u003c", b">": b"\\u003e"}  # how Go's encoder writes them


def go_json(text: str) -> bytes:
    line = json.dumps({"c": text}).encode()
    for char, escape in GO_ESCAPES.items():
        line = line.replace(char, escape)
    return line


@pytest.mark.parametrize("url, password", [
    ("postgres://app:Pa@ss-w0rd-2024@db.internal:5432/prod", "Pa@ss-w0rd-2024"),  # `@` unencoded: the last one ends it
    ("mysql://root:$ecr3t!Xq@db/app", "$ecr3t!Xq"),  # a `$` in a password is a character, not a reference
    ("mysql://root:Kq8&zP2x<m>@db/app", "Kq8&zP2x<m>"),
    ("amqp://ada@corp.example:Zr8xLq9Vb@mq.internal/", "Zr8xLq9Vb"),  # a user with an `@`
    ("redis://default:Zr8%40xLq9Vb@cache:6379", "Zr8%40xLq9Vb"),
])
def test_a_password_in_a_url_goes_whole(url, password):
    for line in (json.dumps({"c": f"$ env\n{url}\n"}).encode(), go_json(f"$ env\n{url}\n")):
        redacted, counts = REDACTOR.redact(line)
        assert counts == {"url_password": 1}
        assert orjson.loads(redacted)["c"] == f"$ env\n{url.replace(':' + password + '@', ':[REDACTED:url_password]@')}\n"


@pytest.mark.parametrize("url", [
    "postgres://user:${PASSWORD}@host", "postgres://user:$PGPASSWORD@host", "postgres://u:<password>@h",
    "postgres://u:<your-db-password>@h", "postgres://u:{password}@h", "postgres://u:%(password)s@h",
    "https://user:pass@example.com", "mongodb://u:pw@h1:27017,h2:27017/db", "ssh://git@github.com:22/acme/app.git",
])
def test_a_placeholder_in_a_url_stays(url):
    for line in (json.dumps({"c": url}).encode(), go_json(url)):
        assert REDACTOR.redact(line) == (line, {})


def test_a_password_in_a_url_is_found_where_basic_auth_detector_finds_it():
    """BasicAuthDetector runs as it is, beside the wider rule: whatever it reports goes too."""
    from detect_secrets.plugins.basic_auth import BasicAuthDetector

    # the last: a backtick in a password, which only the plugin takes (our rule stops at one)
    for url in ("postgresql://app:Zr8xLq9Vb3Nc@db/prod", "https://deploy:k3F9q2Lx7Vb1@git.acme.io/a.git",
                "postgres://u:ab`cd12xyz@h/db"):
        reported = set(BasicAuthDetector().analyze_string(url))
        redacted, _ = REDACTOR.redact(json.dumps({"c": url}).encode())
        assert reported and not any(password.encode() in redacted for password in reported)


# -- JWTs -------------------------------------------------------------------------------------------
def test_a_jwt_goes_with_its_signature_which_detect_secrets_leaves():
    """JwtTokenDetector's regex ends lazily: it reports `header.payload.`, and replacing that
    would leave the signature. The token goes whole, and only where the plugin reports it."""
    from detect_secrets.plugins.jwt import JwtTokenDetector

    header_payload, signature = JWT_HS.rsplit(".", 1)
    assert set(JwtTokenDetector().analyze_string(JWT_HS)) == {header_payload + "."}
    redacted, counts = REDACTOR.redact(json.dumps({"c": f"the token {JWT_HS} is valid"}).encode())
    assert orjson.loads(redacted) == {"c": "the token [REDACTED:jwt] is valid"} and counts == {"jwt": 1}
    assert signature.encode() not in redacted


@pytest.mark.parametrize("text", [
    LOOKALIKES["jwt_payload_not_json"], LOOKALIKES["jwt_header_not_json"], LOOKALIKES["signed_cookie"],
])
def test_an_eyj_token_the_plugin_does_not_validate_stays(text):
    from detect_secrets.plugins.jwt import JwtTokenDetector

    assert not set(JwtTokenDetector().analyze_string(text))
    line = json.dumps({"c": text}).encode()
    assert REDACTOR.redact(line) == (line, {})


def test_a_url_password_is_kept_as_a_template_only_when_the_placeholder_is_all_it_holds():
    from trajectory_assets.redaction.secret_rules import url_password_reason

    assert url_password_reason("<your-redis-password>") == "template"
    for generated in ("Kq8<abcd>m3Z", "x9Lq<host>Zr8!"):
        assert url_password_reason(generated) is None
        redacted, _ = REDACTOR.redact(json.dumps({"c": f"redis://:{generated}@cache:6379"}).encode())
        assert generated.encode() not in redacted
