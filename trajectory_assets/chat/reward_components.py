"""The objectives of a multi-objective reward: NeMo Gym's ``reward_components``.

A multi-objective verifier (NeMo Gym's ``BaseMultiRewardVerifyResponse``) writes the scalar
``reward`` GRPO reads, and beside it ``reward_components {name: score}``, which GDPO-style
trainers normalize one by one. Nothing ties the two (the scalar is usually a weighted sum),
so every rule here reads the components themselves. Only finite numbers are objectives: a
boolean, a string or a nested value in the dict is the verifier's own detail, left out.

Pure functions; no pandas, no Dagster.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import orjson


def objectives(value: str | Mapping[str, Any] | None) -> dict[str, float]:
    """The numeric objectives of a ``reward_components`` value (the table's JSON text, or the dict).

    >>> objectives('{"correctness": 1.0, "format": 0, "judge": "ok", "strict": true}')
    {'correctness': 1.0, 'format': 0.0}
    >>> objectives(None), objectives('[1, 2]')
    ({}, {})
    """
    if value is None:
        return {}
    components = orjson.loads(value) if isinstance(value, (str, bytes)) else value
    if not isinstance(components, Mapping):
        return {}
    return {str(name): float(score) for name, score in components.items()
            if isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score)}


def comparable(first: Mapping[str, float], second: Mapping[str, float]) -> bool:
    """Whether two rollouts were scored on the same objectives (and on some).

    >>> comparable({"a": 1.0}, {"a": 0.0}), comparable({"a": 1.0}, {"b": 0.0}), comparable({}, {})
    (True, False, False)
    """
    return bool(first) and first.keys() == second.keys()


def dominates(chosen: Mapping[str, float], rejected: Mapping[str, float]) -> bool:
    """Pareto dominance: the same objectives, ``chosen`` at least as good on every one and
    better on at least one. Rollouts scored on different objectives are not comparable.

    >>> dominates({"a": 1.0, "b": 0.5}, {"a": 1.0, "b": 0.0}), dominates({"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 1.0})
    (True, False)
    >>> dominates({"a": 1.0}, {"a": 1.0}), dominates({"a": 1.0}, {"b": 0.0}), dominates({}, {})
    (False, False, False)
    """
    if not comparable(chosen, rejected):
        return False
    return all(chosen[name] >= rejected[name] for name in chosen) and any(
        chosen[name] > rejected[name] for name in chosen)


def margins(chosen: Mapping[str, float], rejected: Mapping[str, float]) -> dict[str, float] | None:
    """``chosen - rejected`` per objective both sides were scored on (None: none shared).

    >>> margins({"correctness": 1.0, "format": 0.0}, {"correctness": 0.0, "format": 1.0})
    {'correctness': 1.0, 'format': -1.0}
    >>> margins({"a": 1.0}, {}) is None
    True
    """
    shared = [name for name in chosen if name in rejected]
    return {name: chosen[name] - rejected[name] for name in shared} or None


def summarize(scored: Iterable[Mapping[str, float]]) -> dict[str, dict[str, float | int]] | None:
    """Per objective, over the rollouts scored on it: ``{count, mean, std}`` (population
    standard deviation, as the scalar ``reward_std``). None when no rollout has objectives.

    >>> summarize([{"correctness": 1.0, "format": 0.0}, {"correctness": 0.0}, {}])
    {'correctness': {'count': 2, 'mean': 0.5, 'std': 0.5}, 'format': {'count': 1, 'mean': 0.0, 'std': 0.0}}
    """
    values: dict[str, list[float]] = {}
    for components in scored:
        for name, score in components.items():
            values.setdefault(name, []).append(score)
    summary = {}
    for name, scores in values.items():
        mean = sum(scores) / len(scores)
        summary[name] = {"count": len(scores), "mean": mean,
                         "std": math.sqrt(sum((score - mean) ** 2 for score in scores) / len(scores))}
    return summary or None
