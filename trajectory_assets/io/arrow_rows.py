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

from typing import Any

import orjson
import pyarrow as pa


JSON = pa.json_()  # a JSON value stored as its text; HF datasets' Json feature

# datasets' Value dtypes for the scalar Arrow types the exports use
_DTYPES = {pa.string(): "string", pa.int64(): "int64", pa.int32(): "int32", pa.float64(): "float64",
           pa.bool_(): "bool"}


def table_from_records(records: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """The records as a table of ``schema``; JSON fields take any JSON value (null stays null)."""
    storage = pa.schema([pa.field(f.name, _storage_type(f.type)) for f in schema])
    if storage == schema:
        return pa.Table.from_pylist(records, schema=schema)
    encoders = [(f.name, _encoder(f.type)) for f in schema if _holds_json(f.type)]
    encoded = [{**record, **{name: encode(record.get(name)) for name, encode in encoders}} for record in records]
    return pa.Table.from_pylist(encoded, schema=storage).cast(schema)


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
    checked = pa.schema([f for f in schema if f.type != JSON])  # a JSON field holds any value
    nested = [f for f in checked if _has_struct(f.type)]
    problems: dict[int, list[str]] = {}
    for position, record in enumerate(records):
        for f in nested:
            extra = _extra_key(record.get(f.name), f.type, f.name)
            if extra:
                problems.setdefault(position, []).append(extra)
    try:
        table_from_records([{name: record.get(name) for name in checked.names} for record in records], checked)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        for position, record in enumerate(records):
            try:
                table_from_records([{name: record.get(name) for name in checked.names}], checked)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as error:
                problems.setdefault(position, []).append(_type_problem(record, checked, error))
    found = [f"row {position}: {problem}" for position in sorted(problems) for problem in problems[position]]
    return len(problems), found[:limit]


def _has_struct(arrow_type: pa.DataType) -> bool:
    if pa.types.is_struct(arrow_type):
        return True
    return pa.types.is_list(arrow_type) and _has_struct(arrow_type.value_type)


def _extra_key(value: Any, arrow_type: pa.DataType, where: str) -> str | None:
    """The first key of ``value`` that a struct of ``arrow_type`` does not declare."""
    if value is None:
        return None
    if pa.types.is_struct(arrow_type) and isinstance(value, dict):
        names = {f.name for f in arrow_type}
        extra = next((key for key in value if key not in names), None)
        if extra is not None:
            return f"{where} has a key the schema lacks: {extra!r}"
        for f in arrow_type:
            if _has_struct(f.type):
                found = _extra_key(value.get(f.name), f.type, f"{where}.{f.name}")
                if found:
                    return found
    elif pa.types.is_list(arrow_type) and isinstance(value, list) and _has_struct(arrow_type.value_type):
        for index, item in enumerate(value):
            found = _extra_key(item, arrow_type.value_type, f"{where}[{index}]")
            if found:
                return found
    return None


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


def _encoder(arrow_type: pa.DataType):
    """A function turning a value of ``arrow_type`` into its storage form (JSON fields as text)."""
    if arrow_type == JSON:
        return lambda value: None if value is None else orjson.dumps(value).decode()
    if pa.types.is_struct(arrow_type):
        fields = [(f.name, _encoder(f.type)) for f in arrow_type if _holds_json(f.type)]
        return lambda value: None if value is None else {**value, **{k: enc(value.get(k)) for k, enc in fields}}
    if pa.types.is_list(arrow_type) and _holds_json(arrow_type.value_type):
        item = _encoder(arrow_type.value_type)
        return lambda value: None if value is None else [item(v) for v in value]
    return lambda value: value


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
