"""Secrets (and optionally e-mail addresses) replaced by typed placeholders.

Agent trajectories routinely hold credentials that tools printed: API keys, tokens, private
keys, passwords in URLs. Redaction runs on each raw line right after its content hash is
taken (so trajectory ids stay stable) and before it is parsed, so nothing downstream (the
trajectory table, the quarantine, every export, the report) ever sees the secret.

Working on the raw JSON text is one regex pass per record instead of one per string. A
replacement never splits a JSON escape or removes a string's quote, so the line stays JSON;
placeholders are plain ASCII. In raw JSON a secret at the start of a line of tool output
follows the two bytes `\\n`: an escape's letter counts as a word boundary (`inside_word`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ahocorasick_rs import BytesAhoCorasick

# name -> (literals, pattern). Every match of a pattern starts with one of its literals, so
# the pattern is only tried where a literal was found: one Aho-Corasick pass over the
# lowercased record finds those places (~500 MB/s here; 31 `in` checks or one `re`
# alternation ran at 30-50 MB/s), and nearly every record has none. Lowercase literals mean
# the pattern ignores case: it then runs on the lowercased record (same byte offsets, since
# only ASCII changes case). A group named "secret" marks what is replaced, else the match.
# A replacement never breaks the JSON around it: a pattern matches a quote or a backslash
# only as a whole JSON escape (every backslash of a run, then the escaped byte) and never
# an unescaped quote, except the optional quote groups `kq` / `vq` around a key's value,
# which stay outside what is replaced. Placeholders are plain ASCII.
KEY_QUOTE = rb"(?P<kq>\\*[\"'])?"  # the quote closing a key, if any, JSON-escaped at any depth
VALUE_QUOTE = rb"(?P<vq>\\*[\"'])?"  # the quote opening its value, if any
ASSIGN = KEY_QUOTE + rb"\s*[:=]\s*" + VALUE_QUOTE
VALUE_END = rb"(?=[\s\"'\\,;}]|$)"  # a whole token: not the start of `conn.get(` or `a.b`
B64 = rb"(?:[a-z0-9+=]|\\*/)"  # base64 (lowercased), `/` possibly JSON-escaped as `\/`
PEM_BODY = rb"(?:[a-z0-9+/=:,.\s-]|\\+[nrt])"  # base64 lines, `Proc-Type:`/`DEK-Info:` headers
PEM_LABEL = rb"[a-z ]{0,40}private key(?: block)?-----"
SECRET_PATTERNS: dict[str, tuple[tuple[bytes, ...], bytes]] = {
    # Up to an END line or, for a key cut short, up to the end of the (possibly nested) string.
    "private_key": ((b"-----begin ",),
                    rb"-----begin " + PEM_LABEL + rb"(?:" + PEM_BODY + rb"*?-----end " + PEM_LABEL
                    + rb"|(?:[^\"\\]|\\+[^\"\\])*)"),
    "anthropic_api_key": ((b"sk-ant-",), rb"sk-ant-[A-Za-z0-9_-]{20,}"),
    "openai_api_key": ((b"sk-",), rb"sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    "aws_access_key_id": ((b"AKIA", b"ASIA"), rb"(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "aws_secret_access_key": ((b"aws_secret_access_key", b"aws_secret_key", b"secret_access_key",
                               b"secretaccesskey"),  # the last: STS / credential-process JSON
                              rb"(?:aws_secret_access_key|aws_secret_key|secret_?access_?key)" + ASSIGN
                              + rb"(?P<secret>" + B64 + rb"{40})(?!" + B64 + rb")"),
    "aws_session_token": ((b"aws_session_token", b"session_token", b"sessiontoken"),
                          rb"(?:aws_)?session_?token" + ASSIGN + rb"(?P<secret>" + B64 + rb"{16,})(?!"
                          + B64 + rb")"),
    "github_token": ((b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_", b"github_pat_"),
                     rb"(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
    "slack_token": ((b"xox",), rb"xox[abposr]-[A-Za-z0-9-]{10,}"),
    "stripe_key": ((b"sk_live_", b"sk_test_", b"rk_live_", b"rk_test_"), rb"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    "google_api_key": ((b"AIza",), rb"AIza[0-9A-Za-z_-]{35}"),
    "huggingface_token": ((b"hf_",), rb"hf_[A-Za-z0-9]{30,}"),
    "jwt": ((b"eyJ",), rb"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    "bearer_token": ((b"bearer",), rb"bearer\s+(?P<secret>[a-z0-9._~+/-]{20,}=*)"),
    "basic_auth": ((b"authorization",),
                   rb"authorization" + ASSIGN + rb"basic\s+(?P<secret>" + B64 + rb"{4,})(?!" + B64 + rb")"),
    "url_password": ((b"://",), rb"://[^/\s:@\"'\\]+:(?P<secret>[^@\s/\"'\\]+)@"),
    "password": ((b"password", b"passwd", b"pwd", b"secret", b"api_key", b"api-key", b"apikey", b"access_token",
                  b"auth_token", b"access-token", b"auth-token"),
                 rb"(?:password|passwd|pwd|secret(?:[_-]?key)?|api[_-]?key|access[_-]?token|auth[_-]?token)"
                 + ASSIGN + rb"(?!(?:true|false|null)" + VALUE_END + rb")(?P<secret>[^\s\"'\\,;}{()\[\].]{4,})"
                 + VALUE_END),
}
# Patterns that start with a name rather than a token prefix: the name may end an
# environment-style identifier (`DB_PASSWORD=`, `MY_API_KEY=`, `CLIENT_SECRET=`).
NAMED = frozenset({"password", "aws_secret_access_key", "aws_session_token", "basic_auth"})
# Patterns whose literal may sit inside a word: `scheme://` and the `@` of an address.
ANYWHERE = frozenset({"url_password", "email"})
EMAIL_PATTERN = ((b"@",), rb"[A-Za-z0-9._%+-]*@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
PLACEHOLDER = b"[REDACTED:%s]"
WORD = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
JSON_LETTER_ESCAPES = frozenset(b"nrtbf")  # `\n` & co.: a letter in the raw bytes, a boundary in the text
UNICODE_ESCAPE = re.compile(rb"\\u[0-9A-Fa-f]{4}")


def inside_word(data: bytes, start: int, name: str) -> bool:
    """Whether the literal at `start` continues a word, so it is not where a secret starts.

    Redaction runs on raw JSON, where a line break or tab before a secret is the two bytes
    `\\n` / `\\t`: the letter of an escape is a boundary, as is the last digit of `\\uXXXX`.
    """
    if start == 0 or name in ANYWHERE:
        return False
    previous = data[start - 1]
    if previous not in WORD or (previous == ord("_") and name in NAMED):
        return False
    if previous in JSON_LETTER_ESCAPES and start >= 2 and data[start - 2] == ord("\\"):
        return False
    return not (start >= 6 and UNICODE_ESCAPE.fullmatch(data, start - 6, start))


@dataclass
class Redactor:
    emails: bool = False

    def __post_init__(self) -> None:
        patterns = dict(SECRET_PATTERNS)
        if self.emails:
            patterns["email"] = EMAIL_PATTERN
        self._patterns = []
        literals: list[bytes] = []
        self._pattern_of_literal: list[int] = []
        for index, (name, (group, pattern)) in enumerate(patterns.items()):
            ignore_case = all(literal == literal.lower() for literal in group) and name != "email"
            self._patterns.append((name, ignore_case, re.compile(pattern)))
            for literal in group:
                literals.append(literal.lower())
                self._pattern_of_literal.append(index)
        self._literals = BytesAhoCorasick(literals)

    def redact(self, data: bytes) -> tuple[bytes, Counter]:
        """The data with every secret replaced, and how many of each type were found."""
        counts: Counter = Counter()
        lowered = data.lower()
        found = self._literals.find_matches_as_indexes(lowered, overlapping=True)
        if not found:
            return data, counts
        spans: list[tuple[int, int, str]] = []
        tried: set[tuple[int, int]] = set()
        for literal, start, _ in found:
            index = self._pattern_of_literal[literal]
            name, ignore_case, regex = self._patterns[index]
            if (index, start) in tried or inside_word(data, start, name):
                continue  # tried already, or the literal is the middle of a longer word
            tried.add((index, start))
            if name == "email":  # the one pattern whose match starts before its literal
                start = _word_start(data, start)
            match = regex.match(lowered if ignore_case else data, start)
            if match:
                group = "secret" if "secret" in regex.groupindex else 0
                spans.append((*match.span(group), name, _bare_json_value(match)))
        if not spans:
            return data, counts
        pieces, position = [], 0
        for start, end, name, bare in sorted(spans, key=lambda span: (span[0], -span[1])):  # longest first
            if start < position:  # overlaps a secret already replaced: that placeholder covers it
                position = max(position, end)
                continue
            placeholder = PLACEHOLDER % name.encode()
            pieces += [data[position:start], b'"%s"' % placeholder if bare else placeholder]
            counts[name] += 1
            position = end
        pieces.append(data[position:])
        return b"".join(pieces), counts


def _bare_json_value(match: re.Match) -> bool:
    """Whether the secret is an unquoted value of a key of the raw JSON itself (`"pin": 1234`).

    An unescaped `"` closing the key is JSON structure, not text inside a string, so the
    placeholder replacing the value must be quoted to keep the line JSON.
    """
    groups = match.re.groupindex
    return "kq" in groups and match.group("kq") == b'"' and match.group("vq") is None


def _word_start(data: bytes, at: int) -> int:
    start = at
    while start > 0 and re.match(rb"[A-Za-z0-9._%+-]", data[start - 1:start]):
        start -= 1
    return start
