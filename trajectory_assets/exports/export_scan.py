"""What the report needs of an export's rows, gathered as the shards write them (no Dagster).

Each shard step scans the rows it writes (:class:`ExportScan`: rows per split, the
trajectories, DPO pairs and GRPO tasks they were made from, and a seeded sample of whole
rows for the report's viewer). The export's merge absorbs the shards' scans in shard order
and writes the result beside the export (``layout.export_summary``), tied to the SHA-256 of
the files it describes. The report reads that summary instead of reading the export's rows
again (issue 42: one read of each row per run).

A scan is exact whatever the number of shards: counts add up, the sets and mappings are
unions in row order, and the sample is the rows of lowest seeded rank, which is the same
whether it is taken over all rows at once or over each shard's own sample. Positions are a
row's index in its split (the split's files one after the other), shifted by the rows of the
shards before it when absorbed.

    >>> scan = ExportScan("sft", "sft", samples=1, seed="s")
    >>> scan.add("train", 0, {"trajectory_id": "t1"})
    >>> later = ExportScan("sft", "sft", samples=1, seed="s")
    >>> later.add("train", 0, {"trajectory_id": "t2"})
    >>> scan.absorb(later)
    >>> dict(scan.rows), sorted(scan.trajectory_ids)
    ({'train': 2}, ['t1', 't2'])
"""

from __future__ import annotations

import hashlib
import heapq
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from trajectory_assets import layout
from trajectory_assets.io.storage import Storage

# fields naming the trajectories a row was made from: (field, what the row calls it)
REFERENCE_FIELDS = (("trajectory_id", "trajectory"), ("chosen_id", "chosen"), ("rejected_id", "rejected"),
                    ("trajectory_ids", "rollout"))


def rank(seed: str, key: str) -> str:
    """The seeded order in which rows are picked: the same on every machine."""
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def rank_number(seed: str, key: str) -> int:
    """``rank(seed, key)``'s first 16 hex digits as a number: how the viewer's sample
    compares rows, every row a shard writes, without a round-trip through hex.

    >>> rank_number("s", "a0") == int(rank("s", "a0")[:16], 16)
    True
    """
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:8], "big")


def trajectory_refs(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(role, trajectory_id) of every validated trajectory a row was made from, in order:
    top-level fields first, then the same fields inside ``extra_info`` (verl).

    >>> trajectory_refs({"chosen_id": "a", "rejected_id": "b", "extra_info": {"chosen_id": "a"}})
    [('chosen', 'a'), ('rejected', 'b')]
    """
    refs: list[tuple[str, str]] = []
    extra = row.get("extra_info")
    for holder in (row,) if extra is None else (row, extra):
        # (dict first: an ABC's isinstance is slow, and every row written is scanned)
        if not (isinstance(holder, dict) or isinstance(holder, Mapping)):
            continue
        get = holder.get
        for name, role in REFERENCE_FIELDS:
            value = get(name)
            if value is None:
                continue
            if isinstance(value, str):
                if value:
                    refs.append((role, value))
            elif isinstance(value, (list, tuple)):
                refs += [(role, v) for v in value if isinstance(v, str) and v]
    return list(dict.fromkeys(refs)) if len(refs) > 1 else refs


def _pair_and_task(row: Mapping[str, Any], refs: list[tuple[str, str]], pairs: dict, tasks: dict) -> None:
    """A DPO row's (chosen, rejected) pair with its margin, a GRPO row's task with its rollouts."""
    chosen = rejected = None  # each the first of its role
    rollouts = []
    for role, trajectory_id in refs:
        if role == "rollout":
            rollouts.append(trajectory_id)
        elif role == "chosen":
            chosen = trajectory_id if chosen is None else chosen
        elif role == "rejected":
            rejected = trajectory_id if rejected is None else rejected
    if chosen is not None or rejected is not None:
        pairs[(chosen or "", rejected or "")] = margin_of(row)
    if rollouts:
        rollouts = tuple(rollouts)
        extra = row.get("extra_info")
        task = row.get("task_key") or (extra.get("task_key") if isinstance(extra, Mapping) else None)
        tasks[str(task or "|".join(rollouts))] = rollouts


def margin_of(row: Mapping[str, Any]) -> float | None:
    value = row.get("quality_difference")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class ExportScan:
    """One pass over an export's rows: which trajectories it holds, its pairs and tasks,
    and the rows picked for the viewer."""

    name: str
    family: str  # sft / dpo / grpo (the manifest's config_section)
    samples: int
    seed: str
    # a row with no trajectory reference is ranked by its place: in a shard's scan, the shard
    # and its position there (its place in the split is not known before the merge)
    shard: int | None = None
    rows: Counter = field(default_factory=Counter)  # per split
    trajectory_ids: set[str] = field(default_factory=set)
    pairs: dict[tuple[str, str], float | None] = field(default_factory=dict)  # (chosen, rejected) -> margin
    tasks: dict[str, tuple[str, ...]] = field(default_factory=dict)  # task -> its rollouts' trajectory ids
    # the rows picked so far: a heap of (-rank, split, position, row as scanned)
    _picked: list[tuple[int, str, int, Mapping[str, Any]]] = field(default_factory=list)

    def add(self, split: str, position: int, row: Mapping[str, Any]) -> None:
        """One row, at ``position`` in its split."""
        self.add_rows(split, position, [row])

    def add_rows(self, split: str, first: int, rows: list[Mapping[str, Any]]) -> None:
        """Rows of one split, the first at position ``first`` and the others after it. (One
        call per chunk: a shard step scans every row it writes, 228k rows at 1 GB.)"""
        self.rows[split] += len(rows)
        pairs, tasks, picked, samples = self.pairs, self.tasks, self._picked, self.samples
        place = f"{self.name}:{split}:" if self.shard is None else f"{self.name}:{split}:{self.shard}:"
        ids: list[str] = []
        for position, row in enumerate(rows, first):
            refs = trajectory_refs(row)
            if len(refs) == 1 and refs[0][0] == "trajectory":  # an SFT row: no pair, no task
                key = refs[0][1]
                ids.append(key)
            else:
                row_ids = [trajectory_id for _, trajectory_id in refs]
                ids += row_ids
                key = "|".join(row_ids) if row_ids else f"{place}{position}"
                _pair_and_task(row, refs, pairs, tasks)
            if samples:
                negative_rank = -rank_number(self.seed, key)
                # a row that cannot enter a full heap is not pushed: heappushpop would hand it back
                if len(picked) < samples or picked[0][0] <= negative_rank:
                    self._keep((negative_rank, split, position, row))
        self.trajectory_ids.update(ids)

    def _keep(self, entry: tuple[int, str, int, Mapping[str, Any]]) -> None:
        if len(self._picked) < self.samples:
            heapq.heappush(self._picked, entry)
        else:
            heapq.heappushpop(self._picked, entry)  # the heap drops the highest rank

    def picked(self) -> list[tuple[str, int, Mapping[str, Any]]]:
        """The rows picked for the viewer, lowest rank first: (split, position, row as scanned)."""
        return [(split, position, row) for _, split, position, row in sorted(self._picked, key=lambda e: -e[0])]

    def absorb(self, later: "ExportScan") -> None:
        """Takes in the scan of the rows that follow these in every split (the next shard's)."""
        for entry in later._picked:
            negative_rank, split, position, row = entry
            self._keep((negative_rank, split, position + self.rows[split], row))
        self.rows.update(later.rows)
        self.trajectory_ids |= later.trajectory_ids
        self.pairs.update(later.pairs)
        self.tasks.update(later.tasks)

    def restore_rows(self, stored: Callable[[list[tuple[str, int, Mapping[str, Any]]]], list]) -> None:
        """The picked rows replaced by the rows as the files hold them, so the viewer shows
        them as written: ``stored`` is given the picked (split, position, row) and returns
        each one's stored row, or None for a row to leave out."""
        rows = stored([(split, position, row) for _, split, position, row in self._picked])
        self._picked = [(*entry[:3], row) for entry, row in zip(self._picked, rows) if row is not None]
        heapq.heapify(self._picked)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serializable form (the summary the report reads), in a canonical order: a
        shard scans its chunks split by split, a file scan goes through one split after the
        other, and the report's use of the pairs and tasks does not depend on their order."""
        return {"name": self.name, "family": self.family, "samples": self.samples, "seed": self.seed,
                "rows": dict(sorted(self.rows.items())), "trajectory_ids": sorted(self.trajectory_ids),
                "pairs": sorted([chosen, rejected, margin] for (chosen, rejected), margin in self.pairs.items()),
                "tasks": sorted([task, list(rollouts)] for task, rollouts in self.tasks.items()),
                # ranks as positive numbers: below 2**64, which JSON integers hold
                "picked": [[-negative_rank, split, position, row] for negative_rank, split, position, row in self._picked]}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "ExportScan":
        scan = cls(value["name"], value["family"], value["samples"], value["seed"])
        scan.rows = Counter(value["rows"])
        scan.trajectory_ids = set(value["trajectory_ids"])
        scan.pairs = {(chosen, rejected): margin for chosen, rejected, margin in value["pairs"]}
        scan.tasks = {task: tuple(rollouts) for task, rollouts in value["tasks"]}
        scan._picked = [(-rank_value, split, position, row) for rank_value, split, position, row in value["picked"]]
        heapq.heapify(scan._picked)
        return scan


def write_summary(store: Storage, export: str, files: dict[str, dict[str, Any]], scan: ExportScan) -> None:
    """The export's merged scan, beside the files it describes (``files``: the manifest's,
    whose SHA-256 it keeps)."""
    store.write_bytes(layout.export_summary(export), orjson.dumps(
        {"files": _hashes(files), "scan": scan.to_json()}, option=orjson.OPT_SERIALIZE_NUMPY))


def stored_scan(store: Storage, export: str, manifest: dict[str, Any], samples: int, seed: str) -> ExportScan | None:
    """The scan its merge wrote of the files ``manifest`` lists, picked with these report
    settings; None when there is none (an export written before summaries), it describes
    other files, or it picked its sample with other settings: the report then reads the rows."""
    if not store.exists(layout.export_summary(export)):
        return None
    summary = orjson.loads(store.read_bytes(layout.export_summary(export)))
    scan = summary["scan"]
    if summary["files"] != _hashes(manifest.get("files", {})) or (scan["samples"], scan["seed"]) != (samples, seed):
        return None
    return ExportScan.from_json(scan)


def _hashes(files: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: described["sha256"] for name, described in files.items()}
