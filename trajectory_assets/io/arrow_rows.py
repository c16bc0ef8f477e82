"""Export rows as Arrow tables with JSON fields, and the features HF ``datasets`` reads them as.

A field typed ``pa.json_()`` (:data:`JSON`) holds a JSON value of any shape, stored as
its text: Parquet writes it with the JSON logical type, and ``datasets`` (4.7 and later)
loads it as its ``Json`` feature, handing back the object as written. Rows arrive as Python
values, so :func:`table_from_records` encodes the values of JSON fields to text, builds the
table on the schema's storage types and casts it to the schema.

:func:`hf_features` gives the ``dataset_info.features`` of a dataset card's YAML for a
schema: the same list ``datasets.Features._to_yaml_list`` writes (``tests/trainers`` checks
this against ``datasets`` itself), so ``load_dataset("<export folder>")`` casts every file,
JSON lines included, to the declared types.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import orjson
import pyarrow as pa


JSON = pa.json_()  # a JSON value stored as its text; HF datasets' Json feature

# datasets' Value dtypes for the scalar Arrow types the exports use
_DTYPES = {pa.string(): "string", pa.int64(): "int64", pa.int32(): "int32", pa.float64(): "float64",
           pa.bool_(): "bool"}


def table_from_records(records: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """The records as a table of ``schema``; JSON fields take any JSON value (null stays null).

    Built column by column, as ``Table.from_pylist`` builds it (a record's missing field is
    null), with only the JSON fields' values encoded: a record is never copied."""
    storage, encoders = _storage_of(schema)
    if not encoders:
        return pa.Table.from_pylist(records, schema=schema)
    columns = []
    try:
        for f in schema:
            values = [record.get(f.name) for record in records]
            encode = encoders.get(f.name)
            columns.append(values if encode is None else [None if value is None else encode(value) for value in values])
    except Exception:
        # a value that cannot be encoded: the error is the one a record by record encoding
        # meets first (a record's fields in order), whichever column this one met first
        for record in records:
            for name, encode in encoders.items():
                if (value := record.get(name)) is not None:
                    encode(value)
        raise
    return pa.Table.from_arrays(columns, schema=storage).cast(schema)


@lru_cache(maxsize=64)
def _storage_of(schema: pa.Schema) -> tuple[pa.Schema, dict[str, Callable[[Any], Any]]]:
    """The schema's storage (JSON fields as text) and the encoder of each field holding JSON
    (a non-null value to its storage form). Built once per schema: the calls are many, the
    schemas few."""
    storage = pa.schema([pa.field(f.name, _storage_type(f.type)) for f in schema])
    return storage, {f.name: _encoder(f.type) for f in schema if _holds_json(f.type)}


def schema_violations(records: list[dict[str, Any]], schema: pa.Schema, limit: int = 5) -> tuple[int, list[str]]:
    """How many of ``records`` do not have the Arrow types of ``schema`` (a value of another
    type, or a key a struct does not declare), and the first ``limit`` problems. What a
    dataset card declares is then what every JSON line holds, as ``datasets`` casts it.
    Fields of JSON type take any JSON value; a record's top-level fields beyond the schema
    are its own (declared beside it). Rows are checked all at once, one by one only when a
    check fails.

    >>> schema = pa.schema([("turns", pa.list_(pa.struct([("from", pa.string())]))), ("n", pa.int64())])
    >>> bad, problems = schema_violations([{"turns": [{"from": "h"}], "n": 1},
    ...                                    {"turns": [{"from": "h", "to": "g"}], "n": "2"}], schema)
    >>> bad, problems[0], problems[1].startswith("row 1: n: Could not convert '2'")
    (1, "row 1: turns[0] has a key the schema lacks: 'to'", True)
    """
    # a JSON field holds any value, at any depth: the type check leaves it out (Arrow ignores a
    # key a struct does not declare; the key check knows the JSON fields), so no JSON field is
    # encoded only to be checked (a third of the check's time for the NeMo RL and Axolotl rows)
    checked, nested = _checks_of(schema)
    if nested and (conforms := _conformity_of(schema)) is not None and all(map(conforms, records)):
        return 0, []  # every value plainly of its type, no key beyond a struct's: nothing to look for
    problems: dict[int, list[str]] = {}
    for position, record in enumerate(records):
        for name, checker in nested:
            value = record.get(name)
            extra = None if value is None else checker(value)
            if extra is not None:
                *path, key = extra
                problems.setdefault(position, []).append(f"{name}{''.join(path)} has a key the schema lacks: {key!r}")
    try:  # Arrow reads only the fields a schema declares: a record's others, and JSON fields, are left alone
        pa.Table.from_pylist(records, schema=checked)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        for position, record in enumerate(records):
            try:
                pa.Table.from_pylist([record], schema=checked)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as error:
                problems.setdefault(position, []).append(_type_problem(record, checked, error))
    found = [f"row {position}: {problem}" for position in sorted(problems) for problem in problems[position]]
    return len(problems), found[:limit]


@lru_cache(maxsize=64)
def _checks_of(schema: pa.Schema) -> tuple[pa.Schema, tuple[tuple[str, Callable[[Any], tuple | None]], ...]]:
    """What :func:`schema_violations` checks of ``schema``: the schema without its JSON fields
    (the type check), and the key checker of each of its fields holding a struct."""
    checked = pa.schema([f.with_type(kept) for f in schema if (kept := _without_json(f.type)) is not None])
    return checked, tuple((f.name, checker) for f in schema if f.name in checked.names
                          and (checker := _key_checker(f.type)) is not None)


def _key_checker(arrow_type: pa.DataType) -> Callable[[Any], tuple | None] | None:
    """A function finding the first key of a value that a struct of ``arrow_type`` does not
    declare: None, or the path to it (outermost part first) and the key. None when the type
    holds no struct. Built once per schema: the rows are many, the types few.

    >>> check = _key_checker(pa.list_(pa.struct([("role", pa.string()), ("calls", pa.list_(pa.struct([("id", pa.string())])))])))
    >>> check([{"role": "user"}]), check([{"role": "user"}, {"calls": [{"id": "1", "x": 2}]}])
    (None, ('[1]', '.calls', '[0]', 'x'))
    """
    if pa.types.is_struct(arrow_type):
        names = frozenset(f.name for f in arrow_type)
        children = [(f.name, checker) for f in arrow_type if (checker := _key_checker(f.type)) is not None]

        def check_struct(value: Any) -> tuple | None:
            if not isinstance(value, dict):
                return None  # a value of another type: the type check names it
            if not names.issuperset(value):
                return (next(key for key in value if key not in names),)
            for name, checker in children:
                child = value.get(name)
                found = None if child is None else checker(child)
                if found is not None:
                    return (f".{name}", *found)
            return None

        return check_struct
    if pa.types.is_list(arrow_type):
        item_checker = _key_checker(arrow_type.value_type)
        if item_checker is None:
            return None

        def check_list(value: Any) -> tuple | None:
            if not isinstance(value, list):
                return None
            for index, item in enumerate(value):
                found = None if item is None else item_checker(item)
                if found is not None:
                    return (f"[{index}]", *found)
            return None

        return check_list
    return None


# the widest int Arrow takes for a double exactly, and the range of an int64
_EXACT_IN_DOUBLE = 2**53
_INT64 = range(-(2**63), 2**63)


@lru_cache(maxsize=64)
def _conformity_of(schema: pa.Schema) -> Callable[[Any], bool] | None:
    """A plain walk telling that a record surely has the types of ``schema`` and no key a
    struct lacks: every value exactly of the Python type Arrow takes for its field (``str``,
    ``bool``, ``float``, an ``int`` in range, ``list``, ``dict``) or null; a JSON field any.
    False says only "not surely": :func:`schema_violations` then asks Arrow, which names the
    problem. None for a schema of other types. Rows of nested values are checked this way in
    one pass (Arrow would copy every string into a table only to find nothing). The one value
    of a type Arrow refuses that this does not look for is a ``str`` holding a lone surrogate
    (not UTF-8): no export row holds one (its payloads are Arrow strings, valid UTF-8, decoded
    by orjson, which refuses one) and a JSON line could not be written with one.

    >>> conforms = _conformity_of(pa.schema([("turns", pa.list_(pa.struct([("from", pa.string())]))), ("n", pa.int64())]))
    >>> conforms({"turns": [{"from": "h"}, None], "n": 1, "other": {1}}), conforms({"turns": [{"from": "h", "to": "g"}]})
    (True, False)
    >>> conforms({"turns": [{"from": 1}]}), conforms({"n": True}), conforms({"n": 2**63})
    (False, False, False)
    >>> _conformity_of(pa.schema([("calls", pa.list_(pa.struct([("arguments", JSON)])))]))({"calls": [{"arguments": {"a": [1]}}]})
    True
    """
    return _fields_conformity(schema, closed=False)  # a record's fields beyond the schema are its own


def _fields_conformity(fields: pa.Schema | pa.StructType, closed: bool) -> Callable[[Any], bool] | None:
    """Whether a dict surely holds ``fields`` of their types (see :func:`_conformity_of`) and,
    when ``closed`` (a struct), no other key. None when a field's type is not one it knows."""
    checks = []
    for f in fields:
        check = _conformity(f.type)
        if check is None or not f.nullable:
            return None
        checks.append((f.name, check))
    names = frozenset(f.name for f in fields)
    # text fields checked in the loop itself (a message is mostly text): no call per value
    strings = tuple(f.name for f in fields if f.type == pa.string())
    checks = [(name, check) for name, check in checks if name not in strings]

    def conforms(value: Any) -> bool:
        if type(value) is not dict or (closed and not names.issuperset(value)):
            return False
        for name in strings:
            child = value.get(name)
            if child is not None and type(child) is not str:
                return False
        for name, check in checks:
            child = value.get(name)
            if child is not None and not check(child):
                return False
        return True

    return conforms


def _conformity(arrow_type: pa.DataType) -> Callable[[Any], bool] | None:
    """Whether a non-null value is surely of ``arrow_type`` (see :func:`_conformity_of`)."""
    if _without_json(arrow_type) is None:  # JSON, or a list of it: any value
        return lambda value: True
    if arrow_type == pa.string():
        return lambda value: type(value) is str
    if arrow_type == pa.bool_():
        return lambda value: type(value) is bool
    if arrow_type == pa.int64():
        return lambda value: type(value) is int and value in _INT64
    if arrow_type == pa.float64():
        return lambda value: type(value) is float or (type(value) is int and -_EXACT_IN_DOUBLE <= value <= _EXACT_IN_DOUBLE)
    if pa.types.is_list(arrow_type):
        item = _conformity(arrow_type.value_type)
        if item is None:
            return None

        def list_conforms(value: Any) -> bool:
            if type(value) is not list:
                return False
            for v in value:
                if v is not None and not item(v):
                    return False
            return True

        return list_conforms
    if pa.types.is_struct(arrow_type):
        return _fields_conformity(arrow_type, closed=True)
    return None


def _without_json(arrow_type: pa.DataType) -> pa.DataType | None:
    """``arrow_type`` with every JSON field left out; None for a JSON type (or a list of one).

    >>> _without_json(pa.list_(pa.struct([("name", pa.string()), ("arguments", JSON)])))
    ListType(list<item: struct<name: string>>)
    """
    if arrow_type == JSON:
        return None
    if pa.types.is_struct(arrow_type):
        return pa.struct([f.with_type(kept) for f in arrow_type if (kept := _without_json(f.type)) is not None])
    if pa.types.is_list(arrow_type):
        item = _without_json(arrow_type.value_type)
        return None if item is None else pa.list_(item)
    return arrow_type


def _type_problem(record: dict[str, Any], schema: pa.Schema, error: Exception) -> str:
    """Which field of a record Arrow could not take, and why."""
    for f in schema:
        try:
            table_from_records([{f.name: record.get(f.name)}], pa.schema([f]))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as field_error:
            return f"{f.name}: {str(field_error).splitlines()[0][:200]}"
    return str(error).splitlines()[0][:200]


def hf_features(schema: pa.Schema) -> list[dict[str, Any]]:
    """The YAML ``dataset_info.features`` list of a dataset card, one entry per column."""
    return [{"name": f.name, **_yaml_type(f.type)} for f in schema]


def _holds_json(arrow_type: pa.DataType) -> bool:
    if arrow_type == JSON:
        return True
    if pa.types.is_struct(arrow_type):
        return any(_holds_json(f.type) for f in arrow_type)
    if pa.types.is_list(arrow_type):
        return _holds_json(arrow_type.value_type)
    return False


def _storage_type(arrow_type: pa.DataType) -> pa.DataType:
    if arrow_type == JSON:
        return pa.string()
    if pa.types.is_struct(arrow_type):
        return pa.struct([pa.field(f.name, _storage_type(f.type)) for f in arrow_type])
    if pa.types.is_list(arrow_type):
        return pa.list_(_storage_type(arrow_type.value_type))
    return arrow_type


def _encoder(arrow_type: pa.DataType) -> Callable[[Any], Any]:
    """A function turning a non-null value of ``arrow_type`` that holds JSON into its storage
    form: each JSON value as its text (UTF-8 bytes, which Arrow takes for a string), a struct
    copied only when a JSON field in it holds a value."""
    if arrow_type == JSON:
        return orjson.dumps
    if pa.types.is_struct(arrow_type):
        fields = [(f.name, _encoder(f.type)) for f in arrow_type if _holds_json(f.type)]

        def encode_struct(value: Any) -> Any:
            if isinstance(value, dict):
                for name, _ in fields:
                    if value.get(name) is not None:
                        break
                else:
                    return value  # nothing to encode: Arrow reads it as it is
            encoded = {**value}
            for name, encode in fields:
                child = value.get(name)
                encoded[name] = None if child is None else encode(child)
            return encoded

        return encode_struct
    item_type = arrow_type.value_type  # a list of values holding JSON
    item = _encoder(item_type)
    if pa.types.is_struct(item_type) and sum(_holds_json(f.type) for f in item_type) == 1:
        # a list of structs with one field holding JSON (a message's tool calls): most items
        # hold none there and are taken as they are, without a call each (messages are many)
        (name,) = [f.name for f in item_type if _holds_json(f.type)]
        return lambda value: [v if type(v) is dict and v.get(name) is None else None if v is None else item(v)
                              for v in value]
    return lambda value: [None if v is None else item(v) for v in value]


def _yaml_type(arrow_type: pa.DataType) -> dict[str, Any]:
    if arrow_type == JSON:
        return {"dtype": "json"}
    if pa.types.is_struct(arrow_type):
        return {"struct": [{"name": f.name, **_yaml_type(f.type)} for f in arrow_type]}
    if pa.types.is_list(arrow_type):
        inner = _yaml_type(arrow_type.value_type)
        # datasets writes a list of one dtype or of one struct in short form
        if list(inner) == ["dtype"]:
            return {"list": inner["dtype"]}
        if list(inner) == ["struct"]:
            return {"list": inner["struct"]}
        return {"list": inner}
    return {"dtype": _DTYPES[arrow_type]}
