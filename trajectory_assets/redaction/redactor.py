"""Secrets (and optionally e-mail addresses) replaced by typed placeholders.

Agent trajectories routinely hold credentials that tools printed: API keys, tokens, private
keys, passwords in connection strings. Redaction runs on each raw line right after its
content hash is taken (so trajectory ids stay stable) and before it is parsed, so nothing
downstream (the trajectory table, the quarantine, every export, the report) ever sees the
secret. What counts as a secret is decided in `secret_rules` (detect-secrets, gitleaks'
formats, value checks); this module finds the candidates and replaces what they confirm.

1. Prefilter: one multi-literal pass over the line finds every literal that a rule needs: a
   key prefix such as `ghp_`, or a secret-like name followed by what can follow a name, such
   as `password=` or `API_KEY":`. A line with none, most lines, costs that one pass. The
   literals of a regex rule are derived from the regex itself (`required_literals`), so a
   rule can never match where the prefilter found nothing, and they ignore case exactly
   when the rule does. The pass is Hyperscan's (SIMD) where its wheel exists (x86_64), else
   an Aho-Corasick DFA (ahocorasick-rs), which finds the same and costs 3-4x as much.
2. Each literal found opens a window of the line around it, decoded from raw JSON to text
   (an escape at any nesting depth is one character, `\\n` a line break), where the rules
   run as they would on plain text.
3. A finding maps back to whole raw bytes: it never splits a JSON escape or a UTF-8
   character and never spans a string's closing quote, so the line stays JSON. Placeholders
   are plain ASCII.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from re import Pattern
from re import _constants as sre
from re import _parser as sre_parse

from ahocorasick_rs import BytesAhoCorasick, Implementation

try:
    import hyperscan
except ImportError:  # no wheel for this machine (it has them for x86_64): Aho-Corasick instead
    hyperscan = None

from trajectory_assets.config import ConfigError, RedactionConfig
from trajectory_assets.redaction import secret_rules as rules

PLACEHOLDER = b"[REDACTED:%s]"
DETECTOR = f"detect-secrets {version('detect-secrets')}"
# How far around a literal a window reaches (raw bytes) when the rule's matches can start
# before it, and after it. A token cut by the window's end is extended over its remaining
# characters in the raw line.
BEFORE, AFTER = 256, 512
GRID = 256  # windows start and end on multiples of this, so nearby literals share one
NAME_BEFORE = 128  # a secret-like name is at most this long
MIN_LITERAL = 3  # a shorter literal would be found almost everywhere
MAX_ALTERNATIVES = 256
NAME_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
WORD_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
TOKEN_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
VALUE_BYTES = TOKEN_BYTES | frozenset(b"+/=.~!@#%^*")
JSON_LETTER_ESCAPES = frozenset(b"nrtbf")
UNICODE_ESCAPE = re.compile(rb"\\u[0-9A-Fa-f]{4}")
REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)


# -- the prefilter's literals ---------------------------------------------------------------
def required_literals(pattern: Pattern) -> tuple[frozenset[str], bool] | None:
    """Strings one of which every match of `pattern` contains, and whether every match starts
    with it; None if the pattern has no such set of strings of 3+ characters. The strings
    are as the pattern writes them: their case only counts if the pattern's does."""
    candidates = [(strings, prefix) for strings, prefix in _factors(list(sre_parse.parse(pattern.pattern, pattern.flags)))
                  if strings and min(map(len, strings)) >= MIN_LITERAL]
    if not candidates:
        return None
    strings, prefix = max(candidates, key=lambda c: (min(map(len, c[0])), c[1], -len(c[0])))
    return frozenset(strings), prefix


def _product(left: set[str], right: set[str]) -> set[str] | None:
    joined = {a + b for a in left for b in right}
    return joined if len(joined) <= MAX_ALTERNATIVES else None


def _exact(items) -> set[str] | None:
    """Every string a sequence can match, when it only ever matches fixed text."""
    strings: set[str] | None = {""}
    for op, av in items:
        part = _exact_item(op, av)
        strings = None if part is None else _product(strings, part)
        if strings is None:
            return None
    return strings


def _exact_item(op, av) -> set[str] | None:
    if op is sre.LITERAL:
        return {chr(av)}
    if op is sre.IN and len(av) <= 8 and all(kind is sre.LITERAL for kind, _ in av):
        return {chr(code) for _, code in av}
    if op is sre.SUBPATTERN:
        return _exact(av[-1])
    if op is sre.ATOMIC_GROUP:
        return _exact(av)
    if op is sre.BRANCH:
        branches = [_exact(branch) for branch in av[1]]
        return None if None in branches else set().union(*branches)
    if op in REPEATS and av[1] <= 8:  # `x{3}`, and optional parts such as `[-_]?`
        part = _exact(av[2])
        if part is None:
            return None
        strings, powers = {""}, set()
        for count in range(av[1] + 1):
            if count >= av[0]:
                powers |= strings
            if count < av[1] and (strings := _product(strings, part)) is None:
                return None
        return powers if len(powers) <= MAX_ALTERNATIVES else None
    if op in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
        return {""}  # zero-width
    return None


def _factors(items) -> list[tuple[set[str], bool]]:
    """Sets of strings of which every match of the sequence contains one, each with whether
    it starts the match: its runs of fixed text, and what its parts require."""
    found: list[tuple[set[str], bool]] = []
    run, run_starts = {""}, True
    for op, av in items:
        exact = _exact_item(op, av)
        joined = None if exact is None else _product(run, exact)
        if joined is not None:
            run = joined
            continue
        found.append((run, run_starts))
        if exact is not None:  # too many alternatives together: a new run
            run, run_starts = exact, False
            continue
        for strings, starts in _inner_factors(op, av):
            if starts and run != {""}:
                with_run = _product(run, strings)
                if with_run is not None:
                    found.append((with_run, run_starts))
            found.append((strings, starts and run == {""} and run_starts))
        run, run_starts = {""}, False
    found.append((run, run_starts))
    return [(strings, starts) for strings, starts in found if strings != {""}]


def _inner_factors(op, av) -> list[tuple[set[str], bool]]:
    if op is sre.SUBPATTERN:
        return _factors(av[-1])
    if op is sre.ATOMIC_GROUP:
        return _factors(av)
    if op in REPEATS and av[0] >= 1:
        return _factors(av[2])
    if op is sre.BRANCH:  # every branch must contain one of its own
        best = [_best(_factors(branch)) for branch in av[1]]
        leading = [_best([c for c in _factors(branch) if c[1]]) for branch in av[1]]
        unions = []
        for choice in (best, leading):
            if all(choice):
                unions.append((set().union(*(strings for strings, _ in choice)), all(s for _, s in choice)))
        return unions
    return []


def _best(candidates: list[tuple[set[str], bool]]) -> tuple[set[str], bool] | None:
    candidates = [c for c in candidates if c[0]]
    return max(candidates, key=lambda c: (min(map(len, c[0])), c[1]), default=None)


# -- raw JSON as text -----------------------------------------------------------------------
SPECIAL = re.compile(rb'[\\"]')
BACKSLASHES = re.compile(rb"\\+")
HEX4 = re.compile(rb"[0-9A-Fa-f]{4}")
LINE_BREAK_ESCAPES = {ord("n"): "\n", ord("r"): "\n", ord("t"): "\t", ord("b"): " ", ord("f"): " "}


class Window:
    """Raw bytes `data[start:end]` decoded to text, with the way back to raw offsets.

    An escape at any depth (a run of backslashes and the escaped character) is one character:
    in a JSON document held in a string, a line break is `\\\\n`, and still a line break.
    Bytes are Latin-1, so every byte is one character and secrets, which are ASCII, read as
    themselves. A quote after an even run of backslashes (none included) is JSON structure:
    `quotes` holds its text offsets, and no secret spans one.
    """

    def __init__(self, data: bytes, start: int, end: int) -> None:
        pieces: list[str] = []
        text_marks, raw_marks, quotes = [0], [start], []
        length, raw = 0, start
        while match := SPECIAL.search(data, raw, end):
            at = match.start()
            if at > raw:
                pieces.append(data[raw:at].decode("latin-1"))
                length += at - raw
            run_end = BACKSLASHES.match(data, at, end).end() if data[at] == 0x5C else at
            if run_end == end:  # backslashes cut by the window's end
                char, after = "\\", end
            elif data[run_end] == 0x22 and (run_end - at) % 2 == 0:  # an unescaped quote
                if run_end > at:
                    text_marks.extend((length, length + 1))
                    raw_marks.extend((at, run_end))
                    pieces.append("\\")
                    length += 1
                quotes.append(length)
                char, at, after = '"', run_end, run_end + 1
            elif data[run_end] == ord("u") and HEX4.match(data, run_end + 1, end):
                char, after = chr(int(data[run_end + 1:run_end + 5], 16)), run_end + 5
            else:
                char, after = LINE_BREAK_ESCAPES.get(data[run_end], chr(data[run_end])), run_end + 1
            text_marks.extend((length, length + 1))
            raw_marks.extend((at, after))
            pieces.append(char)
            length += 1
            raw = after
        if end > raw:
            pieces.append(data[raw:end].decode("latin-1"))
        self.text = "".join(pieces)
        self.start, self.end = start, end
        self._text_marks, self._raw_marks, self.quotes = text_marks, raw_marks, quotes

    def raw(self, offset: int) -> int:
        """The raw offset of a text offset (the start of the escape it is part of)."""
        mark = bisect.bisect_right(self._text_marks, offset) - 1
        return self._raw_marks[mark] + offset - self._text_marks[mark]

    def text_offset(self, raw: int) -> int:
        mark = bisect.bisect_right(self._raw_marks, raw) - 1
        return self._text_marks[mark] + raw - self._raw_marks[mark]

    def cut_at_quote(self, start: int, end: int) -> int:
        """`end`, or the first structural quote in [start, end): a secret ends with its string."""
        index = bisect.bisect_left(self.quotes, start)
        return min(end, self.quotes[index]) if index < len(self.quotes) else end


class Line:
    """One raw line being scanned: its windows, decoded once each, and which rule has searched
    which window (a line dense with one literal costs one search per window, not per literal)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._windows: dict[tuple[int, int], Window] = {}
        self.searched: set[tuple[int, tuple[int, int]]] = set()

    def window(self, start: int, end: int, before: int = BEFORE) -> Window:
        """The text around raw [start, end), within its line of text (`\\n` escapes end one)."""
        data = self.data
        low = max(0, (start - before) // GRID * GRID)
        high = min(len(data), -(-(end + AFTER) // GRID) * GRID)
        for line_break in (data.rfind(b"\\n", low, start), data.rfind(b"\\r", low, start)):
            if line_break >= 0:
                low = max(low, line_break + 2)
        for line_break in (data.find(b"\\n", end, high), data.find(b"\\r", end, high)):
            if line_break >= 0:
                high = min(high, line_break)
        while low > 0 and data[low - 1] == 0x5C:  # never start inside a run of backslashes
            low -= 1
        escape = data.rfind(b"\\u", max(0, low - 5), low)
        if escape >= 0:  # nor inside a \uXXXX
            low = escape
        while high < len(data) and data[high - 1] == 0x5C:
            high += 1
        key = (low, high)
        if key not in self._windows:
            self._windows[key] = Window(data, low, high)
        return self._windows[key]


def starts_token(data: bytes, start: int) -> bool:
    """Whether a literal at `start` can begin a token: not the middle of a word. In raw JSON
    a line break or tab before a token is the two bytes `\\n`: the escape's letter is a
    boundary, as is the last digit of a `\\uXXXX`."""
    if start == 0 or data[start - 1] not in WORD_BYTES:
        return True
    if data[start - 1] in JSON_LETTER_ESCAPES and start >= 2 and data[start - 2] == 0x5C:
        return True
    return bool(start >= 6 and UNICODE_ESCAPE.fullmatch(data, start - 6, start))


@dataclass(frozen=True)
class Finding:
    start: int  # raw byte offsets in the line
    end: int
    kind: str
    rank: int  # which of two findings with the same span names it: the lower


def _raw_name(data: bytes, end: int) -> str:
    """The name ending at `end`, read on the raw bytes (`\\nAPI_KEY` is `API_KEY`)."""
    start = end
    while start > 0 and data[start - 1] in NAME_CHARS and end - start < NAME_BEFORE:
        start -= 1
    if start > 0 and data[start - 1] == 0x5C:  # the name starts with the letter of an escape
        start += 5 if data[start] == ord("u") else 1
    return data[start:end].decode("ascii")


def _escaped_variants(literal: bytes) -> list[bytes]:
    """A literal as raw JSON may hold it: some encoders write `/` as `\\/`, at any depth."""
    if b"/" not in literal:
        return [literal]
    return [literal] + [literal.replace(b"/", b"\\" * depth + b"/") for depth in (1, 3)]


def _extend(data: bytes, end: int, allowed: frozenset[int]) -> int:
    while end < len(data) and data[end] in allowed:
        end += 1
    return end


def _snap_utf8(data: bytes, start: int, end: int) -> tuple[int, int]:
    """Widen a span to whole UTF-8 characters (a Latin-1 `\\xa0` is whitespace to `re`)."""
    while start > 0 and data[start] & 0xC0 == 0x80:
        start -= 1
    while end < len(data) and data[end] & 0xC0 == 0x80:
        end += 1
    return start, end


# -- the rules ------------------------------------------------------------------------------
class Rule:
    kind: str
    rank = 1  # of two findings with the same span, the lower rank names it: formats before names
    literals: frozenset[str]  # what the prefilter looks for
    ignore_case = True  # whether it looks for the literals in any case
    # checked on the raw bytes before a window is decoded: the literal starts a token
    gate: str | None = None  # "start": `starts_token`
    hint: Pattern | None = None  # a cheap check on the raw bytes at the literal
    before = BEFORE  # how far before the literal a match can start
    whole = False  # its match is the whole secret, never run on past its end (JWTs)

    def find(self, line: Line, start: int, end: int) -> Iterable[tuple[Window, int, int, str]]:
        """(window, text start, text end, type) of each secret near the literal at [start, end)."""
        raise NotImplementedError


class RegexRule(Rule):
    """A regex run over the decoded window; `check(value)` returns why a match is no secret."""

    def __init__(self, kind: str, regex: Pattern, check=rules.format_reason, *, in_group: bool = False,
                 token: bool = True, rank: int = 0, literals: Iterable[str] | None = None,
                 hint: bytes | None = None) -> None:
        self.kind, self.regex, self.check, self.in_group, self.token = kind, regex, check, in_group, token
        self.rank = rank
        self.hint = None if hint is None else re.compile(hint, re.IGNORECASE)
        if literals is not None:
            self.literals = frozenset(literals)
            return
        derived = required_literals(regex)
        if derived is None:
            raise ValueError(f"{kind}: the regex {regex.pattern!r} has no literal of {MIN_LITERAL}+ characters "
                             "that every match contains, so no prefilter can find it")
        literals, prefix = derived
        self.literals = frozenset(literals)
        self.ignore_case = bool(regex.flags & re.IGNORECASE or "(?i" in regex.pattern)
        if prefix:
            self.before = 0
            if token and not in_group:
                self.gate = "start"

    def _group(self, match: re.Match) -> int | str:
        if self.in_group:  # the first captured group, as detect-secrets reports it
            return next((group for group in range(1, self.regex.groups + 1) if match.group(group)), 0)
        return "secret" if "secret" in self.regex.groupindex else 0

    def find(self, line, start, end):
        window = line.window(start, end, self.before)
        text = window.text
        if self.before == 0:  # every match starts with the literal: the match is here or nowhere
            match = self.regex.match(text, window.text_offset(start))
            matches = [match] if match else []
        elif (id(self), (window.start, window.end)) in line.searched:
            return  # this window was searched for this rule already, for a literal before this one
        else:
            line.searched.add((id(self), (window.start, window.end)))
            matches = self.regex.finditer(text)
        for match in matches:
            begin, finish = match.span(self._group(match))
            if finish <= begin:
                continue
            if self.token and not self.in_group and begin and (text[begin - 1].isalnum() or text[begin - 1] == "_"):
                continue  # the middle of a longer word
            if self.check is None or self.check(text[begin:finish]) is None:
                yield window, begin, finish, self.kind


class PluginRule(RegexRule):
    """One regex of a detect-secrets plugin, with the plugin's own validation of its values."""

    def __init__(self, plugin, index: int, kind: str) -> None:
        key = (type(plugin), index)
        check = rules.url_password_reason if type(plugin).__name__ == "BasicAuthDetector" else rules.format_reason
        super().__init__(kind, plugin.denylist[index], check, in_group=key in rules.PLUGIN_SECRET_IN_GROUP,
                         hint=PLUGIN_HINTS.get((type(plugin).__name__, index)))
        self.plugin = plugin
        self.validates = type(plugin).analyze_string is not rules.RegexBasedDetector.analyze_string

    def find(self, line, start, end):
        for window, begin, finish, kind in super().find(line, start, end):
            value = window.text[begin:finish]
            if not self.validates or value in set(self.plugin.analyze_string(value)):
                yield window, begin, finish, kind


# A JWS compact token on the raw bytes (RFC 7515: three base64url parts, `=` padding
# tolerated as detect-secrets does): header and payload as JwtTokenDetector's regex takes
# them, and the signature, which its lazy `\.?[...]*?` never reaches. Nothing in it is ever
# a JSON escape, so the raw bytes are the token at any nesting depth. Besides `eyJ` (`{"`),
# a header may start as TruffleHog's jwt detector also looks for it: `ewogIC` / `ewoi`,
# a pretty-printed `{\n  "` / `{\n"`.
RAW_JWT = re.compile(rb"(?:eyJ|ewogIC|ewoi)[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+(?:\.[A-Za-z0-9_-]*={0,2})?")
JWT_LITERALS = frozenset({"eyJ", "ewogIC", "ewoi"})


class JwtRule(PluginRule):
    """JwtTokenDetector, made to replace whole tokens of any length.

    The plugin's regex ends lazily (`\\.?[A-Za-z0-9-_.+/=]*?`), so what it reports is
    `header.payload.` and the signature after it would stay in the text; and a token is
    commonly longer than a window (an OAuth access token with its claims runs to 1-2 KB),
    where the payload cut by the window's end fails the plugin's JSON check. So the token is
    taken whole from the raw bytes, the plugin runs on it (its regex and its formal
    validation: header and payload decode to JSON), and what is replaced is the whole token,
    signature included. A header written pretty-printed (`ewogIC…`, which the plugin's `eyJ`
    never matches) gets the plugin's formal validation alone."""

    whole = True  # the token is taken whole from the raw bytes

    def __init__(self, plugin, index: int, kind: str) -> None:
        super().__init__(plugin, index, kind)
        self.literals = JWT_LITERALS

    def find(self, line, start, end):
        match = RAW_JWT.match(line.data, start)
        if not match:
            return
        window = Window(line.data, start, match.end())
        token = window.text
        if token.startswith("eyJ"):
            valid = any(token.startswith(found) for found in self.plugin.analyze_string(token))
        else:
            valid = self.plugin.is_formally_valid(".".join(token.split(".")[:2]))
        if valid:
            yield window, 0, len(token) - token.endswith("."), self.kind  # `h.p.`: a sentence's end, or no signature


# Necessary conditions, on the raw bytes at the literal (any case), for the rules whose
# literal is common in ordinary text (`://` in every URL, `aws` in `laws`): a window is only
# decoded where they hold. Raw text is the decoded text with escapes longer, so gaps are wider.
PLUGIN_HINTS = {
    # `://user:password@`: a user and a password hold neither `/`, whitespace nor `@`; one that
    # holds a quote or a backslash (which a URL must percent-encode) is not looked for
    ("BasicAuthDetector", 0): rb'://[^\s/:@"\\]+:[^\s/@"\\]+@',
    # `aws` then, within 20 characters, a keyword (the regex's own `aws.{0,20}?(?:key|...)`)
    ("AWSKeyDetector", 1): rb"aws.{0,80}?(?:key|pwd|pw|password|pass|token)",
}

# `hf_` is common in paths (`/hf_models/`): a Hugging Face token is 34 letters or digits after it;
# `://` is in every URL: a password is a `:` and something before an `@` (as above, an `@`
# allowed in either part, and a `\uXXXX` escape, which is how Go's encoder writes `&<>`).
# The user part holds no `:` (as the rule's own), or a long run of `:a:a...` without an `@`
# would make the hint backtrack at every colon: quadratic in the line's length
RULE_HINTS = {rules.HF_TOKEN: rb"hf_[a-z0-9]{34}",
              rules.URL_PASSWORD: rb'://(?:[^\s/:"\\]|\\+u[0-9a-f]{4})*:(?:[^\s/"\\]|\\+u[0-9a-f]{4})+@'}

ASSIGNMENT = re.compile(
    r"""["'`\]]{0,3}[ \t]*(?::=|=>|=|:)(?!=)[ \t]*(?P<open>@?["'`]?)(?P<value>[^\s"'`,;]+)(?P<close>["'`]?)""")
# On the raw bytes after a name: an assignment and 8 characters of value (a credential's
# least), none of them an escape but `\/` (a value with a backslash or a non-ASCII character
# in its first 8 is not looked for)
ASSIGNMENT_AHEAD = re.compile(
    rb"""(?:\\*["'`]|\]){0,3}(?:[ \t]|\\+t)*(?::=|=>|=|:)(?!=)(?:[ \t]|\\+t)*@?(?:\\*["'`])?"""
    rb"""(?:[^\s\\"'`,;]|\\+/){8}""")
# What follows a name that is assigned a value (`=`, `:`, aligned ` =` / `  =`, a closing
# quote, plain or JSON-escaped at depth 1 or 2, a closing `]`): the prefilter looks for each
# secret-like word followed by one of these, so `input_tokens`, `api_key_id`, `"verdict":
# "PASS"` or prose (`pass bytes`) never get as far as a window.
NAME_ENDS = ("=", ":", " =", " :", "  ", '":', '" :', '"=', '"]', "':", "' :", "'=", "']", '\\":', '\\" :',
             '\\"]', '\\\\\\":', "`:", "`=")
TRAILING_PUNCTUATION = ".:!?)]}>"


class AssignmentRule(Rule):
    """A secret-like name assigned a value that looks like a credential, in any syntax: env
    files and shell exports (`DB_PASSWORD=…`), JSON / YAML (`"api_key": "…"`), code
    (`token = "…"`), HTTP headers (`X-Api-Key: …`), query strings (`?access_token=…`)."""

    kind = "secret-like name"  # the type comes from the name: password, token, api_key, ...
    before = NAME_BEFORE

    def __init__(self) -> None:
        self.literals = frozenset(word + end for word in rules.name_literals() for end in NAME_ENDS)

    def find(self, line, start, end):
        data, end = line.data, start
        while data[end] in NAME_CHARS:  # the literal's last characters follow the name
            end += 1
        if not ASSIGNMENT_AHEAD.match(data, end) or not rules.secret_name_type(_raw_name(data, end)):
            return
        window = line.window(start, end, self.before)
        text, name_end = window.text, window.text_offset(end)
        name_start = name_end
        while name_start > 0 and (text[name_start - 1].isalnum() or text[name_start - 1] in "_.-"):
            name_start -= 1
        kind = rules.secret_name_type(text[name_start:name_end])
        match = ASSIGNMENT.match(text, name_end) if kind else None
        if not match:
            return
        value, (begin, finish) = match.group("value"), match.span("value")
        quote = match.group("open")[-1:]
        if quote and match.group("close") != quote:
            return  # a quoted value with a space or a quote in it: prose, not a credential
        if not quote:
            if name_start and text[name_start - 1] in "?&":  # a query string: the value ends at `&`
                value = value.split("&", 1)[0]
            value = value.rstrip(TRAILING_PUNCTUATION)
            finish = begin + len(value)
        if value and rules.credential_reason(value) is None:
            yield window, begin, finish, kind


AUTHORIZATION = re.compile(
    r"""(?i)(?:authorization["'`\]]{0,2}[ \t]*[:=][ \t]*["'`]?(?:(?P<scheme>bearer|basic|token|bot|apikey)[ \t]+)?|"""
    r"""(?P<bearer>bearer)[ \t]+)(?P<value>[A-Za-z0-9._~+/-]+=*)""")
# the same on the raw bytes, with 8 characters of value: a window is only decoded where it holds
AUTHORIZATION_AHEAD = re.compile(
    rb"""(?:authorization(?:\\*["'`]|\]){0,2}(?:[ \t]|\\+t)*[:=](?:[ \t]|\\+t)*(?:\\*["'`])?"""
    rb"""(?:(?:bearer|basic|token|bot|apikey)[ \t]+)?|bearer[ \t]+)(?:[a-z0-9._~+-]|\\*/){8}""", re.IGNORECASE)


class AuthorizationRule(Rule):
    """HTTP credentials: `Authorization: Bearer|Token|Basic …`, and `Bearer …` anywhere."""

    kind = "bearer_token / basic_auth"

    gate = "start"
    before = 0

    def __init__(self) -> None:
        self.literals = frozenset({"authorization" + end for end in NAME_ENDS} | {"bearer "})

    def find(self, line, start, end):
        if not AUTHORIZATION_AHEAD.match(line.data, start):
            return
        window = line.window(start, end, self.before)
        match = AUTHORIZATION.match(window.text, window.text_offset(start))
        if not match:
            return
        value, scheme = match.group("value"), (match.group("scheme") or match.group("bearer") or "").lower()
        begin, finish = match.span("value")
        if scheme == "basic":
            if rules.basic_credential(value):
                yield window, begin, finish, "basic_auth"
        elif rules.credential_reason(value) is None:
            yield window, begin, finish, "bearer_token"


PEM_LABEL = rb"[a-z0-9 _-]{0,40}private key(?: block)?-----"
PEM_BODY = rb"(?:[a-z0-9+/=:,.\s-]|\\+[nrt/])"  # base64 lines, `Proc-Type:` / `DEK-Info:` headers
# up to the END line or, for a key cut short, to the end of its (possibly nested) string
PRIVATE_KEY = re.compile(rb"-----begin " + PEM_LABEL + rb"(?:" + PEM_BODY + rb"*?-----end " + PEM_LABEL
                         + rb"|(?:[^\"\\]|\\+[^\"\\])*)", re.IGNORECASE)
PEM_BASE64 = re.compile(rb"[A-Za-z0-9+/=]")


class PrivateKeyRule(Rule):
    """A whole private key block, from its BEGIN line (one of detect-secrets' headers) to its
    END line or, for a key cut short, the end of its string; gitleaks asks for 64+ characters
    of body, so a header alone (code that checks for one) stays."""

    kind = "private_key"

    def __init__(self) -> None:
        self.literals = frozenset({"-----begin"})

    def spans(self, data: bytes, start: int) -> tuple[int, int] | None:
        match = PRIVATE_KEY.match(data, start)
        if not match:
            return None
        header_end = data.index(b"-----", start + 10) + 5
        header = data[start:header_end].decode("latin-1")
        if not any(regex.search(header) for regex in rules.PRIVATE_KEY_HEADERS):
            return None
        if len(PEM_BASE64.findall(data, header_end, match.end())) < rules.MIN_PRIVATE_KEY_BODY:
            return None
        return match.span()


class EmailRule(RegexRule):
    def __init__(self) -> None:
        super().__init__("email", re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"), None,
                         token=False, literals={"@"})
        self.before = 64  # the local part


def builtin_rules(emails: bool = False) -> list[Rule]:
    found: list[Rule] = []
    for plugin_class, kind in rules.PLUGINS.items():
        plugin = plugin_class()
        for index in range(len(plugin.denylist)):
            if (plugin_class.__name__, index) not in rules.UNFILTERABLE_PLUGIN_REGEXES:
                rule = JwtRule if plugin_class is rules.JwtTokenDetector else PluginRule
                found.append(rule(plugin, index, rules.PLUGIN_REGEX_TYPES.get((plugin_class, index), kind)))
    for kind, patterns in rules.FORMAT_RULES.items():
        found += [RegexRule(kind, re.compile(pattern), hint=RULE_HINTS.get(pattern),
                            check=rules.credential_reason if pattern in rules.FORMAT_RULES_JUDGED_AS_VALUES
                            else rules.format_reason) for pattern in patterns]
    found.append(RegexRule("api_key", re.compile(rules.SK_API_KEY), rules.credential_reason, rank=1))
    found.append(RegexRule("url_password", re.compile(rules.URL_PASSWORD), rules.url_password_reason, token=False,
                           hint=RULE_HINTS[rules.URL_PASSWORD]))
    found += [AssignmentRule(), AuthorizationRule(), PrivateKeyRule()]
    if emails:
        found.append(EmailRule())
    return found


def user_rule(name: str, pattern: str) -> RegexRule:
    """An in-house token format: its whole match (or its group `secret`) is replaced, as is."""
    return RegexRule(name, re.compile(pattern), None, token=False)


class HyperscanPrefilter:
    """Where the rules' literals occur in a line: one Hyperscan pass over the raw line (its
    literal mode, case-insensitive where the rule is), reporting every occurrence."""

    def __init__(self, literals: list[tuple[bytes, bool]]) -> None:  # (literal, ignore case)
        self._lengths = [len(literal) for literal, _ in literals]
        self._database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self._database.compile(  # a few hundred literals: ~40 ms, once per batch
            expressions=[literal for literal, _ in literals], ids=list(range(len(literals))),
            flags=[hyperscan.HS_FLAG_CASELESS if ignore_case else 0 for _, ignore_case in literals], literal=True)

    def hits(self, data: bytes) -> list[tuple[int, int, int]]:
        found: list[tuple[int, int, int]] = []
        self._database.scan(data, match_event_handler=self._on_match, context=found)
        return found

    def _on_match(self, index: int, _start: int, end: int, _flags: int, found: list) -> None:
        found.append((index, end - self._lengths[index], end))


class AhoCorasickPrefilter:
    """The same hits from an Aho-Corasick DFA (ahocorasick-rs) over the lowercased line; a
    literal whose rule minds case is then compared as written."""

    def __init__(self, literals: list[tuple[bytes, bool]]) -> None:  # (literal, ignore case)
        by_lowered: dict[bytes, list[int]] = {}
        for index, (literal, _) in enumerate(literals):
            by_lowered.setdefault(literal.lower(), []).append(index)
        self._literals = literals
        self._lowered = list(by_lowered)
        self._indexes = [by_lowered[literal] for literal in self._lowered]
        # a DFA: 2-4x the default automaton's speed here; built once per batch in milliseconds
        self._automaton = BytesAhoCorasick(self._lowered, implementation=Implementation.DFA)

    def hits(self, data: bytes) -> list[tuple[int, int, int]]:
        found = []
        for lowered, start, end in self._automaton.find_matches_as_indexes(data.lower(), overlapping=True):
            for index in self._indexes[lowered]:
                literal, ignore_case = self._literals[index]
                if ignore_case or data.startswith(literal, start):
                    found.append((index, start, end))
        return found


PREFILTER = HyperscanPrefilter if hyperscan else AhoCorasickPrefilter


class Redactor:
    """Finds and replaces secrets in raw JSON lines (see the module docstring).

    `allowlist`: regexes; a secret that one matches in full is left in place.
    `extra_rules`: name -> regex of an in-house token format, replaced by `[REDACTED:name]`.
    """

    @classmethod
    def from_config(cls, config: RedactionConfig) -> "Redactor":
        """The redactor a `RedactionConfig` describes (whose `enabled` the caller checks); one
        per process and config (building one compiles every rule, which a run of many
        batches would otherwise pay per batch). A rule it cannot use is a ``ConfigError``
        (``check_rules``)."""
        check_rules(config)
        return _redactor(cls, config.emails, tuple(config.allowlist),
                         tuple(sorted((config.extra_rules or {}).items())))

    def __init__(self, emails: bool = False, allowlist: Sequence[str] = (),
                 extra_rules: Mapping[str, str] | None = None) -> None:
        self._rules = builtin_rules(emails) + [user_rule(n, p) for n, p in (extra_rules or {}).items()]
        self._allowlist = [re.compile(pattern) for pattern in allowlist]
        literals: dict[tuple[bytes, bool], list[int]] = {}
        for index, rule in enumerate(self._rules):
            for literal in rule.literals:
                for variant in _escaped_variants(literal.encode("latin-1")):
                    literals.setdefault((variant, rule.ignore_case), []).append(index)
        self._literals = list(literals)
        self._rules_of_literal = [literals[key] for key in self._literals]
        self._escaped = [b"\\" in literal for literal, _ in self._literals]
        self._prefilter = PREFILTER(self._literals)
        extras = [f"{len(extra_rules or {})} extra rule(s)"] if extra_rules else []
        extras += [f"{len(allowlist)} allowlist pattern(s)"] if allowlist else []
        # what the manifests and cards name: the maintained detector this runs on, and the user's part
        self.detector = " + ".join([DETECTOR + " with trajectory-assets rules", *extras])

    def redact(self, data: bytes) -> tuple[bytes, Counter]:
        """The data with every secret replaced, and how many of each type were found."""
        counts: Counter = Counter()
        findings = self.findings(data)
        if not findings:
            return data, counts
        pieces, position = [], 0
        for finding in findings:
            pieces += [data[position:finding.start], PLACEHOLDER % finding.kind.encode()]
            counts[finding.kind] += 1
            position = finding.end
        pieces.append(data[position:])
        return b"".join(pieces), counts

    def candidates(self, data: bytes) -> list[tuple[int, int, int]]:
        """The prefilter's hits: (literal index, start, end) of every literal some rule needs."""
        return self._prefilter.hits(data)

    def findings(self, data: bytes) -> list[Finding]:
        """The secrets of a line, in order, none overlapping (one that overlaps another is
        merged into the first, which then covers both)."""
        hits = self.candidates(data)
        if not hits:
            return []
        line = Line(data)
        found: set[Finding] = set()
        tried: set[tuple[int, int]] = set()
        key_block_end = -1  # a private key block found so far ends here: headers inside it are its own
        for literal, start, end in hits:
            escaped = self._escaped[literal]  # the raw bytes differ from the text: no byte checks
            for index in self._rules_of_literal[literal]:
                rule = self._rules[index]
                if (index, start) in tried:
                    continue
                if rule.gate == "start" and not starts_token(data, start):
                    continue
                if not escaped and rule.hint is not None and not rule.hint.match(data, start):
                    continue
                if isinstance(rule, PrivateKeyRule):
                    if start < key_block_end:
                        continue
                    span = rule.spans(data, start)
                    if span:  # never scan one block again from each of its lines
                        key_block_end = span[1]
                        found.add(Finding(*span, rule.kind, rule.rank))
                    continue
                tried.add((index, start))
                found.update(self._confirm(rule, line, start, end))
        merged: list[Finding] = []
        for finding in sorted(found, key=lambda f: (f.start, -f.end, f.rank, f.kind)):
            if merged and finding.start < merged[-1].end:
                last = merged[-1]
                merged[-1] = Finding(last.start, max(last.end, finding.end), last.kind, last.rank)
            else:
                merged.append(finding)
        return merged

    def _confirm(self, rule: Rule, line: Line, start: int, end: int) -> Iterable[Finding]:
        data = line.data
        for window, begin, finish, kind in rule.find(line, start, end):
            finish = window.cut_at_quote(begin, finish)
            if finish <= begin or begin in window.quotes:
                continue
            if any(pattern.fullmatch(window.text[begin:finish]) for pattern in self._allowlist):
                continue
            raw_start, raw_end = window.raw(begin), window.raw(finish)
            if rule.whole:  # the match is the whole secret
                pass
            elif isinstance(rule, RegexRule) and rule.token:  # a token runs on past its pattern's end
                raw_end = _extend(data, raw_end, TOKEN_BYTES)
            elif finish == len(window.text) and window.end < len(data):
                raw_end = _extend(data, raw_end, VALUE_BYTES)  # a value cut by the window
            yield Finding(*_snap_utf8(data, raw_start, raw_end), kind, rule.rank)


RULE_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


def check_rules(config: RedactionConfig) -> None:
    """Raises a ``ConfigError`` naming the first of the config's ``extra_rules`` that cannot be a
    rule: its name must make a placeholder, its regex pass ``rule_problem``. Checked here, not
    when the config loads: every asset reads the config, and only ingest redacts, so an edit to
    the redactor versions only the ingest assets anew (``code_versions.py``)."""
    for name, pattern in config.extra_rules.items():
        if not RULE_NAME.fullmatch(name):
            raise ConfigError(f"redaction.extra_rules: rule name {name!r} must be lowercase letters, digits and _ "
                              f"(at most 40), since it becomes the placeholder [REDACTED:{name}]")
        problem = rule_problem(pattern)
        if problem:
            raise ConfigError(f"redaction.extra_rules.{name} {pattern!r} {problem}")


def rule_problem(pattern: str) -> str | None:
    """Why a user's regex cannot be a redaction rule (None if it can): it must be ASCII and
    compile, must not match empty text, and must contain a literal the prefilter looks for."""
    if not pattern.isascii():
        return "holds a non-ASCII character: rules run on text read byte by byte, where it never matches"
    try:
        regex = re.compile(pattern)
    except re.error as error:
        return f"is not a valid regex: {error}"
    if regex.fullmatch(""):
        return "matches empty text"
    if required_literals(regex) is None:
        return (f"has no literal of {MIN_LITERAL}+ characters that every match contains "
                "(a fixed prefix such as `acme_`), so the prefilter could not find it")
    return None


@functools.lru_cache(maxsize=4)
def _redactor(cls: type[Redactor], emails: bool, allowlist: tuple[str, ...],
              extra_rules: tuple[tuple[str, str], ...]) -> Redactor:
    return cls(emails=emails, allowlist=allowlist, extra_rules=dict(extra_rules))
