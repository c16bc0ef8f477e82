"""Conformance of redaction over every real file in ../shared/corpus: every redaction it makes
is listed here, reviewed one by one, and any other one fails the test.

These are real coding, terminal, tool-use and chat rollouts (NeMo Gym's example rollouts and
Hermes Agent trajectory samples): code with `password=` arguments, `passwd` and `PGPASSWORD`
handling, URLs, base64 images, `"api_key": "EMPTY"` for local servers. None of it holds a
credential, so the list is empty: the redactor before this one replaced 5 values there (each
`"api_key": "EMPTY"`), all of them false positives.
"""

import pytest

from tests.conftest import shared_data
from trajectory_assets.redaction.redactor import Redactor

# (file, line number, type, the text replaced): every redaction over the corpus
EXPECTED_REDACTIONS: list[tuple[str, int, str, str]] = []


@pytest.fixture(scope="module")
def corpus_lines():
    corpus = shared_data("corpus")
    return [(path.relative_to(corpus).as_posix(), number, line)
            for path in sorted(corpus.rglob("*.jsonl"))
            for number, line in enumerate(path.read_bytes().split(b"\n"), start=1) if line.strip()]


def test_every_redaction_over_the_corpus_is_listed(corpus_lines):
    redactor = Redactor()
    found = [(name, number, finding.kind, line[finding.start:finding.end].decode("utf-8", errors="replace"))
             for name, number, line in corpus_lines for finding in redactor.findings(line)]
    assert found == EXPECTED_REDACTIONS


def test_the_corpus_exercises_the_rules(corpus_lines):
    """The corpus is not trivially clean: the prefilter finds candidates in many lines (names
    such as `password` / `passwd` / `api_key` assigned values, URLs, `aws` in prose)."""
    redactor = Redactor()
    with_candidates = sum(bool(redactor.candidates(line)) for _, _, line in corpus_lines)
    assert len(corpus_lines) > 200 and with_candidates > 50
