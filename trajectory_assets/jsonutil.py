"""One place for JSON encoding rules, so hashes and files agree everywhere."""

from __future__ import annotations

import json

import hashlib
from typing import Any

import orjson


def dumps(obj: Any) -> bytes:
    """Compact JSON as written to datasets (key order preserved, UTF-8, no NaN)."""
    return orjson.dumps(obj)


def canonical(obj: Any) -> bytes:
    """Canonical JSON (sorted keys) - the input of every content hash."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


def parses_as_json(text: str) -> bool:
    """Whether a text (a tool call's arguments, as a model wrote them) is JSON, read by the
    standard library, which also takes the NaN and Infinity Python's json module writes.

    >>> parses_as_json('{"city": "Oslo"}'), parses_as_json('{"city": Oslo}'), parses_as_json("NaN")
    (True, False, True)
    """
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True
