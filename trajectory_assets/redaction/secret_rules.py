"""What counts as a secret: the detectors redaction runs and the tests a value must pass.

Built on detect-secrets (Yelp): its plugins for well-known key formats run as they are, its
keyword list names the secret-like variables, and its heuristic filters (UUIDs, templates,
`$` references, sequential strings) and Shannon entropy judge values. On top of it, for the
kinds it lacks or takes narrower, formats from gitleaks' default rule set
(`config/gitleaks.toml`, cited by rule id) and TruffleHog's detectors, the wider of the two,
and rules of our own: secret-named assignments whose *value* looks like a credential,
`Authorization` headers, passwords in URLs as RFC 3986 and URL parsers allow them, and whole
private key blocks.

Precision first: a name never triggers on its own, and a value that is a word, an
identifier, an expression, a reference, a placeholder, a path, a UUID or a labelled hash is
left alone, so code, documentation and terminal transcripts reach the exports verbatim.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter
from re import Pattern

from detect_secrets.filters import heuristic
from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.cloudant import CloudantDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.keyword import DENYLIST as KEYWORD_DENYLIST
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector

# detect-secrets plugins that run, and the placeholder type of what each finds. Every regex of
# their `denylist` runs on its own, prefiltered by a literal that every one of its matches
# contains (`redaction.required_literals`); a regex without one cannot be prefiltered and is
# listed in UNFILTERABLE_PLUGIN_REGEXES.
PLUGINS: dict[type[RegexBasedDetector], str] = {
    AWSKeyDetector: "aws_access_key_id",  # its second regex finds secret keys: PLUGIN_REGEX_TYPES
    ArtifactoryDetector: "artifactory_token",
    AzureStorageKeyDetector: "azure_storage_key",
    BasicAuthDetector: "url_password",
    CloudantDetector: "cloudant_credential",
    GitHubTokenDetector: "github_token",
    GitLabTokenDetector: "gitlab_token",
    IbmCosHmacDetector: "ibm_cos_hmac_secret",
    JwtTokenDetector: "jwt",
    MailchimpDetector: "mailchimp_key",
    NpmDetector: "npm_token",
    OpenAIDetector: "openai_api_key",
    PypiTokenDetector: "pypi_token",
    SendGridDetector: "sendgrid_key",
    SlackDetector: "slack_token",
    SquareOAuthDetector: "square_oauth_secret",
    StripeDetector: "stripe_key",
}
PLUGIN_REGEX_TYPES = {(AWSKeyDetector, 1): "aws_secret_access_key"}
# (plugin, index): regexes whose match holds context (a name, a URL) and whose first captured
# group is the secret, as detect-secrets reports it; every other regex's whole match is the
# token (GitHub's and GitLab's groups capture only a token's prefix, e.g. `ghp` or `glpat`,
# which detect-secrets reports as the secret; replacing that alone would leave the token).
PLUGIN_SECRET_IN_GROUP = {(AWSKeyDetector, 1), (BasicAuthDetector, 0), (NpmDetector, 0), (CloudantDetector, 2),
                          (CloudantDetector, 3), (IbmCosHmacDetector, 0)}
PLUGIN_GROUP_IN_TOKEN = {(GitHubTokenDetector, 0), (GitLabTokenDetector, 0), (GitLabTokenDetector, 2)}
# (plugin, index in its denylist): regexes with no literal of 3+ characters that every match
# contains. Cloudant's two keyword-assignment forms (`cl_key = <64 hex>`) are covered by the
# secret-named assignment rule; Artifactory's `AP…` passwords start with two fixed letters only.
UNFILTERABLE_PLUGIN_REGEXES = {("ArtifactoryDetector", 1), ("CloudantDetector", 0), ("CloudantDetector", 1)}
# The other plugins of detect-secrets, and why they do not run.
PLUGINS_NOT_RUN = {
    "PrivateKeyDetector": "flags only a key's BEGIN line; the private_key rule replaces the whole block "
                          "and takes its list of headers",
    "KeywordDetector": "flags any value of a secret-like name (`password=password`); the assignment rule "
                       "takes its list of names and adds value checks",
    "Base64HighEntropyString": "flags any random-looking quoted string: hashes, ids, base64 images "
                               "(entropy still judges values assigned to secret-like names)",
    "HexHighEntropyString": "flags any hex string: hashes and ids (as above)",
    "IPPublicDetector": "an IP address is not a credential",
    "DiscordBotTokenDetector": "no fixed literal in its pattern, so no prefilter can find it",
    "TelegramBotTokenDetector": "no fixed literal in its pattern, so no prefilter can find it",
    "TwilioKeyDetector": "its only literals are two letters (`AC`, `SK`), too common to prefilter on",
    "IbmCloudIamDetector": "any 44-character value assigned to key / token / pass: the assignment rule "
                           "covers these with value checks",
    "SoftlayerDetector": "any 64-character value assigned to key / token / pass (and a SOAP URL): the "
                         "assignment rule covers these with value checks",
}

HF_TOKEN = r"hf_[a-zA-Z0-9]{34}(?![A-Za-z0-9_])"  # exactly 34, as TruffleHog's and gitleaks' \b
# Formats detect-secrets lacks or takes narrower, each checked against both gitleaks'
# config/gitleaks.toml (cited by rule id) and TruffleHog's pkg/detectors/<name>/<name>.go
# (cited as `trufflehog <name>`): where they differ, the wider of the two (alphabet, length,
# prefixes), so long as every match holds a fixed literal the prefilter can look for. The
# table in docs/redaction.md gives all three patterns of each. Their trailing boundary groups
# (gitleaks' `(?:[\x60'"\s;]|\\[nr]|$)`, TruffleHog's `\b`) are left out, since the text
# here is decoded and a finding is extended to the end of its token anyway.
FORMAT_RULES: dict[str, list[str]] = {
    "anthropic_api_key": [r"sk-ant-api03-[a-zA-Z0-9_\-]{93}AA",  # anthropic-api-key = trufflehog anthropic
                          r"sk-ant-admin01-[a-zA-Z0-9_\-]{93}AA"],  # anthropic-admin-api-key
    # trufflehog openai: any length around `T3BlbkFJ` (gitleaks' openai-api-key takes 74 or 58
    # characters each side), `sk-service-` too; `admin` from gitleaks and trufflehog openaiadmin
    "openai_api_key": [r"sk-(?:(?:proj|svcacct|service|admin)-[A-Za-z0-9_-]+|[a-zA-Z0-9]+)T3BlbkFJ[A-Za-z0-9_-]+"],
    "google_api_key": [r"AIza[\w-]{35}"],  # gcp-api-key (trufflehog googlegemini: `AIzaSy` + 33, narrower)
    # huggingface-access-token / -organization-api-token take letters only (`(?i:[a-z]{34})`);
    # trufflehog huggingface, the scanner the Hub itself runs on pushes, takes digits too
    # (`[a-zA-Z0-9]{34}`, its own test token has them) and Hugging Face documents no
    # alphabet: the wider one, so a token with a digit is not missed
    "huggingface_token": [HF_TOKEN, r"api_org_[a-zA-Z0-9]{34}(?![A-Za-z0-9_])"],
    "github_token": [r"github_pat_\w{82}",  # github-fine-grained-pat
                     # trufflehog github v2: 36-255 after the prefix (judged as a value: a
                     # `github_pat_…` identifier of that length is no token)
                     r"github_pat_[a-zA-Z0-9_]{36,255}"],
    "gitlab_token": [r"glpat-[0-9a-zA-Z_-]{27,300}\.[0-9a-z]{2}[0-9a-z]{7}",  # gitlab-pat-routable
                     r"glrt-t\d_[0-9a-zA-Z_\-]{27,300}\.[0-9a-z]{2}[0-9a-z]{7}",  # gitlab-runner-...-token-routable
                     r"glffct-[0-9a-zA-Z_\-]{20}",  # gitlab-feature-flag-client-token
                     r"glpat-[a-zA-Z0-9\-=_]{20,22}"],  # trufflehog gitlab v2: `=` too
    "npm_token": [r"(?i)npm_[a-z0-9]{36}"],  # npm-access-token = trufflehog npmtokenv2
    "pypi_token": [r"pypi-AgEIcHlwaS5vcmc[\w-]{50,1000}"],  # pypi-upload-token: 50+ after the prefix, detect-secrets 70+
    # sendgrid: trufflehog's lengths (20-24 and 39-50) around detect-secrets' 22 and 43
    "sendgrid_key": [r"SG\.[\w-]{20,24}\.[\w-]{39,50}"],
    # trufflehog squareapp: any `sq0c..-` OAuth secret of 40-50 characters (detect-secrets: sq0csp-, 43)
    "square_oauth_secret": [r"sq0c[a-z]{2}-[0-9A-Za-z_-]{40,50}"],
    # square-access-token's `sq0atp-` form (its `EAAA` form is not taken: those four letters
    # start runs of base64 data, images included, far too often)
    "square_access_token": [r"sq0atp-[\w-]{22,60}"],
    "stripe_key": [r"(?:sk|rk)_(?:test|live|prod)_[a-zA-Z0-9]{10,99}"],  # stripe-access-token
    "slack_token": [r"(?i)xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+",  # slack-app-token
                    r"(?i)xoxe.xox[bp]-\d-[A-Z0-9]{163,166}",  # slack-config-access-token
                    r"(?i)xoxe-\d-[A-Z0-9]{146}",  # slack-config-refresh-token
                    r"xox[ar]-(?:\d-)?[0-9a-zA-Z]{8,48}",  # slack-legacy-workspace-token (no digit group needed)
                    # slack-webhook-url: workflow and trigger URLs too (detect-secrets: services/ only),
                    # to the end of the path (gitleaks stops at 56 characters, which leaves the
                    # end of a workflow URL; trufflehog slackwebhook: services and workflows)
                    r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,}"],
    "aws_bedrock_api_key": [r"ABSK[A-Za-z0-9+/]{109,269}={0,2}"],  # aws-amazon-bedrock-api-key-long-lived
    # more formats with a fixed prefix (the prefilter's literal)
    "digitalocean_token": [r"do[opr]_v1_[a-f0-9]{64}"],  # digitalocean-pat, -access-, -refresh-token = trufflehog digitaloceanv2
    "shopify_token": [r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"],  # shopify-access-token, -custom-, -private-app-, -shared-secret
    "vault_token": [r"hvs\.[\w-]{90,120}", r"hvb\.[\w-]{138,300}"],  # vault-service-token, vault-batch-token
    "databricks_token": [r"dapi[a-f0-9]{32}(?:-\d)?"],  # databricks-api-token = trufflehog databrickstoken
    "grafana_token": [r"glsa_[A-Za-z0-9_]{41}",  # trufflehog grafanaserviceaccount (gitleaks: 32 alnum, `_`, 8 hex)
                      r"glc_[A-Za-z0-9+/]{32,400}={0,3}",  # grafana-cloud-api-token
                      r"eyJrIjoi[A-Za-z0-9]{70,400}={0,3}"],  # grafana-api-key (the legacy keys, base64 JSON)
    "postman_token": [r"PMAK-[a-zA-Z0-9-]{59}"],  # trufflehog postman (gitleaks: hex, 24-34)
    "linear_api_key": [r"lin_api_[a-zA-Z0-9]{40}"],  # linear-api-key = trufflehog linearapi
    "age_secret_key": [r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"],  # age-secret-key
    "perplexity_api_key": [r"pplx-[a-zA-Z0-9]{48}"],  # perplexity-api-key
    "planetscale_token": [r"pscale_(?:tkn|oauth|pw)_[\w=.-]{32,64}"],  # planetscale-api-token, -oauth-token, -password
    "pulumi_token": [r"pul-[a-z0-9]{40}"],  # trufflehog pulumi (gitleaks pulumi-api-token: hex)
    "prefect_token": [r"pnu_[a-zA-Z0-9]{36}"],  # prefect-api-token = trufflehog prefect
    "heroku_api_key": [r"HRKU-AA[0-9a-zA-Z_-]{58}"],  # heroku-api-key-v2 = trufflehog heroku v2
    "notion_token": [r"ntn_[0-9]{11}[A-Za-z0-9]{35}",  # notion-api-token
                     # trufflehog notion: the older `secret_` + 43 (judged as a value: `secret_` is a common word)
                     r"secret_[A-Za-z0-9]{43}"],
}
# Format rules whose prefix is also an ordinary identifier's: a match must also pass the
# credential checks (not a word or an identifier, entropy)
FORMAT_RULES_JUDGED_AS_VALUES = {r"secret_[A-Za-z0-9]{43}", r"github_pat_[a-zA-Z0-9_]{36,255}"}
# Keys of OpenAI-compatible providers (`sk-` and 32+ random characters; OpenAI's own keys
# carry `T3BlbkFJ` and are found above). No maintained rule set has this one: the value must
# also pass the credential checks below.
SK_API_KEY = r"sk-[A-Za-z0-9_-]{32,}"

# `scheme://user:password@host` with any password RFC 3986 allows in a URL's userinfo
# (section 3.2.1: sub-delims `!$&'()*+,;=` and further colons included), and
# `redis://:password@host`, with no user, the usual form for Redis. The userinfo ends at the
# last `@` before the host, as URL parsers read it (WHATWG URL; RFC 3986 would have an `@`
# in a password percent-encoded, but `p@ss@host` is written and parsed all the same), so a
# password holding an `@` goes whole. detect-secrets' BasicAuthDetector, which runs too,
# excludes the sub-delims and the `@` from both parts and needs a user, so
# `mysql://root:s3cret!@db` passed it; TruffleHog's URI detector takes sub-delims and `:`
# but only in http(s) URLs and not `@`. A quote, a backtick or a backslash ends a password
# here (a URL written in code or JSON ends at them); BasicAuthDetector's own pattern, which
# runs beside this one, takes a backtick in a password, so what either finds goes.
URL_PASSWORD = r"://[^:/?#\[\]\s\"'`\\]*:(?P<secret>[^/?#\[\]\s\"'`\\]+)@"

# -- names --------------------------------------------------------------------------------
# detect-secrets' keyword denylist (`api_?key`, `password`, `secret`, ...) plus what gitleaks'
# generic-api-key rule also keys on (token, credential, creds, auth) and common key names.
KEY_QUALIFIERS = frozenset(
    [entry[: -len("_?key")] for entry in KEYWORD_DENYLIST if entry.endswith("_?key")]
    + ["secret", "access", "signing", "encryption", "master", "app", "consumer"]
)
# a name whose last word ends with one of these is secret-like (DB_PASSWORD, clientSecret, ...)
SUFFIX_NOUNS = {"password": "password", "passwd": "password", "passphrase": "password",
                "secret": "secret", "token": "token", "credential": "credential",
                "credentials": "credential", "creds": "credential"}
# a name whose last word is exactly one of these is secret-like (`pwd`, not `cwd` or `bypass`;
# `pass` covers detect-secrets' `db_?pass`, `database_?pass`, `key_?pass`). Names are read as
# ASCII words, so its `contraseña` is looked for as `contrasena` only.
EXACT_NOUNS = {"pwd": "password", "pass": "password", "auth": "credential",
               **{entry: "password" for entry in KEYWORD_DENYLIST if entry.startswith("contras") and entry.isascii()}}
# Google-style APIs name pagination cursors `pageToken` / `nextPageToken`: not credentials
NOT_SECRET_QUALIFIERS = frozenset({"page"})
NAME_SEGMENT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def name_literals() -> set[str]:
    """The lowercase words a secret-like name ends with: the prefilter's literals."""
    words = set(SUFFIX_NOUNS) | set(EXACT_NOUNS)
    for qualifier in KEY_QUALIFIERS:
        words |= {f"{qualifier}{separator}key" for separator in ("", "_", "-", ".")}
    return words


def secret_name_type(name: str) -> str | None:
    """The placeholder type for a value assigned to `name`, or None if the name is not secret-like."""
    words = [word.lower() for word in NAME_SEGMENT.findall(name)]
    if not words:
        return None
    last, before = words[-1], words[:-1]
    if before and before[-1] in NOT_SECRET_QUALIFIERS:
        return None
    if last in EXACT_NOUNS:
        return EXACT_NOUNS[last]
    if (last == "token" and before[-1:] == ["session"]) or last.endswith("sessiontoken"):
        return "aws_session_token"  # what AWS names the STS session token (env, JSON, config)
    for noun, kind in SUFFIX_NOUNS.items():
        if last.endswith(noun):
            return kind
    if last == "key" and before:
        qualifier, earlier = before[-1], before[:-1]
    elif last.endswith("key") and last[:-3] in KEY_QUALIFIERS:
        qualifier, earlier = last[:-3], before
    else:
        return None
    if qualifier not in KEY_QUALIFIERS:
        return None
    if qualifier == "api":
        return "api_key"
    if (qualifier == "access" and earlier[-1:] == ["secret"]) or (qualifier == "secret" and earlier[-1:] == ["aws"]):
        return "aws_secret_access_key"
    return "secret"


# -- values -------------------------------------------------------------------------------
MIN_VALUE_LENGTH = 8
MIN_VALUE_ENTROPY = 3.0  # bits per character, over the value's own characters
MIN_FORMAT_ENTROPY = 3.0  # gitleaks' usual threshold for its key-format rules
# gitleaks' global allowlist (config/gitleaks.toml, [[allowlists]] regexes): booleans,
# variable references in the shell / CI / template languages, format strings, common paths.
# In Python syntax: the first is anchored as a whole, the `(?i)` of the /Users/ one scoped.
GITLEAKS_ALLOWLIST = [re.compile(pattern) for pattern in (
    r"(?i)^(?:true|false|null)$",
    r"^(?i:a+|b+|c+|d+|e+|f+|g+|h+|i+|j+|k+|l+|m+|n+|o+|p+|q+|r+|s+|t+|u+|v+|w+|x+|y+|z+|\*+|\.+)$",
    r"^\$(?:\d+|{\d+})$",
    r"^\$(?:[A-Z_]+|[a-z_]+)$",
    r"^\${(?:[A-Z_]+|[a-z_]+)}$",
    r"^\{\{[ \t]*[\w ().|]+[ \t]*}}$",
    r"^%(?:[A-Z_]+|[a-z_]+)%$",
    r"^%[+\-# 0]?[bcdeEfFgGoOpqstTUvxX]$",
    r"^\{\d{0,2}}$",
    r"^@(?:[A-Z_]+|[a-z_]+)@$",
    r"^/Users/(?i:[a-z0-9]+)/[\w .-/]+$",
    r"^/(?:bin|etc|home|opt|tmp|usr|var)/[\w ./-]+$",
)]
# Words that mark a documentation placeholder (`<your-api-key>`, `sk-xxxx`, `changeme`); the
# upper-case EXAMPLE is how AWS's documented keys end (gitleaks allowlists `.+EXAMPLE$`).
PLACEHOLDER_WORDS = re.compile(r"your|example|sample|dummy|placeholder|changeme|change_me|redacted|xxxx|fake",
                               re.IGNORECASE)
TEMPLATE_MARKS = ("{{", "}}", "${", "$(", "%(", "<", ">", "***", "...", "\u2026")
REPEATED_RUN = re.compile(r"(.)\1{5}")  # six of one character: gitleaks' stopwords 000000 / aaaaaa / xxxxxx
EXPRESSION = re.compile(r"[\w$.\]][(\[]|->|::")  # a call, an index or a member access
HASH_LABEL = re.compile(r"(?i)^(?:sha(?:1|224|256|384|512)|sha3-\d+|md5|blake2[bs]?|sha512-|sha256-)[:$=-]?")
WORD_PIECE = re.compile(r"([A-Za-z]+)(\d{0,2})|\d{1,4}")
PIECE_SEPARATORS = re.compile(r"[-_.:/+~@]+")
BASE64_CHARS = re.compile(r"[A-Za-z0-9+/=_-]+")


def shannon_entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _letters_are_words(letters: str) -> bool:
    """Identifier-like letters: camelCase / PascalCase / UPPER / lower words, not mixed-case noise.

    Split at case changes, real identifiers have words of 2.5+ letters on average
    (`ThisIsAVeryLongName`, `myAPIKey`); random mixed case changes case about every second
    letter."""
    words = NAME_SEGMENT.findall(letters)
    return len(words) == 1 or len(letters) / len(words) >= 2.5


def is_word_like(value: str) -> bool:
    """Every piece (between separators) is a word, a word with a short number (`Hunter2`,
    `base64`), or a short number: an identifier, a dotted path or prose, not a credential."""
    for piece in filter(None, PIECE_SEPARATORS.split(value)):
        match = WORD_PIECE.fullmatch(piece)
        if not match or (match.group(1) and not _letters_are_words(match.group(1))):
            return False
    return True


def placeholder_reason(value: str) -> str | None:
    """Why a value is a placeholder, a reference or a mask rather than a secret (None if it is not)."""
    if heuristic.is_templated_secret(value) or heuristic.is_prefixed_with_dollar_sign(value):
        return "reference"
    if any(pattern.search(value) for pattern in GITLEAKS_ALLOWLIST):
        return "gitleaks_allowlist"
    if any(mark in value for mark in TEMPLATE_MARKS):
        return "template"
    if "EXAMPLE" in value or PLACEHOLDER_WORDS.search(value):
        return "placeholder"
    if REPEATED_RUN.search(value):
        return "placeholder"
    if any(heuristic.is_sequential_string(run) for run in re.findall(r"[A-Za-z0-9+/=]{8,}", value)):
        return "sequential"
    return None


def format_reason(value: str, min_entropy: float = MIN_FORMAT_ENTROPY) -> str | None:
    """Why a match of a key-format rule is not a real key: a placeholder in the format's shape."""
    reason = placeholder_reason(value)
    if reason:
        return reason
    if shannon_entropy(value) < min_entropy:
        return "low_entropy"
    return None


def credential_reason(value: str) -> str | None:
    """Why a value assigned to a secret-like name does not look like a credential (None if it does).

    A credential is 8+ characters, has a letter, is not a word / identifier / expression /
    reference / placeholder / path / UUID / labelled hash, and carries entropy."""
    if len(value) < MIN_VALUE_LENGTH:
        return "short"
    if heuristic.is_not_alphanumeric_string(value):
        return "no_letter"
    if HASH_LABEL.match(value):
        return "labelled_hash"
    if heuristic.is_potential_uuid(value):
        return "uuid"
    if "://" in value or value.startswith(("/", "./", "../", "~/")):
        return "path"
    if EXPRESSION.search(value):
        return "expression"
    reason = placeholder_reason(value)
    if reason:
        return reason
    if is_word_like(value):
        return "word"
    if shannon_entropy(value) < MIN_VALUE_ENTROPY:
        return "low_entropy"
    return None


# `$PGPASSWORD`, `${DB_PASS}`: a shell variable; `<password>`, `<your-db-pass>`: a placeholder
SHELL_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
ANGLE_PLACEHOLDER = re.compile(r"<([^<>]{3,})>")


def url_password_reason(value: str) -> str | None:
    """A password in `scheme://user:password@host` is a credential by its place, unless it is
    a placeholder or names the thing (`user:password@`, `:<password>@`, `:${DB_PASS}@`).

    A `$`, `<` or `>` is a character of a generated password (`$ecr3t!x`, `Kq8<zP2x>m`), not a
    reference or a template, unless a variable or a `<placeholder>` is all it holds."""
    if len(value) < 3:
        return "short"
    reference = SHELL_REFERENCE.fullmatch(value)
    if reference and is_word_like(reference.group(1)):
        return "reference"
    template = ANGLE_PLACEHOLDER.fullmatch(value)  # `<password>`, never `Kq8<zP2x>m3Z`
    if template and is_word_like(template.group(1)):
        return "template"
    characters = value.replace("<", "").replace(">", "")
    reason = placeholder_reason(characters[1:] if characters.startswith("$") and characters[1:2] != "{" else characters)
    if reason:
        return reason
    if is_word_like(value) and (secret_name_type(value) or any(
            secret_name_type(word) for word in NAME_SEGMENT.findall(value))):
        return "placeholder"
    return None


def basic_credential(value: str) -> bool:
    """Whether an `Authorization: Basic` value is base64 of `user:password`."""
    if not BASE64_CHARS.fullmatch(value):
        return False
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    user, colon, password = decoded.partition(":")
    return bool(colon) and bool(password) and decoded.isprintable()


# -- private keys -------------------------------------------------------------------------
PRIVATE_KEY_HEADERS: list[Pattern] = list(PrivateKeyDetector.denylist)
MIN_PRIVATE_KEY_BODY = 64  # gitleaks private-key: `-----BEGIN ... PRIVATE KEY-----[\s\S-]{64,}?`
