"""Dataset cards: a README beside each export, rendered from its manifest alone.

A card says what a trainer is about to consume: how many rows, which filters and pairing
made them, what was left out and why, the reward, token and length distributions, and the
sources, so nobody has to read the pipeline to know what is in a file.

It opens with the Hugging Face YAML front matter that makes the export folder a Hub dataset:
``configs`` naming each split's files by a glob (``train-*.jsonl``: its shards, which
``datasets`` reads in name order as one split), ``dataset_info.features`` (the row types,
JSON fields included), the ``license`` of the config's ``card`` section and tags.
``datasets.load_dataset("<export folder>")`` then gives the splits with those types and
nothing else to pass. A split without rows is left out of ``configs``: ``datasets`` refuses
to build an empty split.
"""

from __future__ import annotations

from typing import Any

import orjson
import yaml

from trajectory_assets import layout
from trajectory_assets.markdown import table
from trajectory_assets.sources.provenance import reward_provenance_lines

# what a row's token count measures, per family
MEASURED = {
    "sft": "the whole conversation with its tools",
    "dpo": "the longer of prompt + chosen and prompt + rejected, with the tools",
    "grpo": "the prompt with its tools and the generation prompt",
}


def render_card(manifest: dict[str, Any], purpose: str, training: str | None = None) -> str:
    """``purpose``: what the export is, in a trainer's words (its registry description);
    ``training``: which trainer setting trains the messages ``sft.train_on`` picks."""
    name = manifest["export"]
    rows = manifest["rows"]
    lines = [
        front_matter(manifest),
        f"# {name}",
        "",
        purpose,
        "",
        f"- rows: **{sum(rows.values())}** (train {rows.get('train', 0)}, validation {rows.get('validation', 0)});"
        f" format: {manifest['format']}",
        f"- made by trajectory-assets {manifest['code_version']} from {len(manifest['sources'])} source file(s)"
        f" in {len(manifest['batches'])} batch(es); the split is by prompt, so no prompt is in both splits",
        *_dataset_lines(manifest),
        redaction_line(manifest["sources"]),
        "",
        "## Files",
        "",
        "Each split is its files in name order (each file's rows, bytes and SHA-256 are in `manifest.json`):",
        "",
        *table(["split", "files", "rows", "bytes"],
                [[split, f"{totals['files']} (`{totals['glob']}`)", totals["rows"], totals["bytes"]]
                 for split, totals in split_totals(manifest["files"]).items()]),
        "",
        "## Left out, and why",
        "",
        *table(["reason", "count"], list(manifest["excluded"].items())),
        *_decontamination_lines(manifest),
        "",
        "## Distributions of the exported rows",
        "",
        *table(["measure", "count", "min", "p10", "mean", "p50", "p90", "max"],
                [[measure, *(d.get(k, "") for k in ("count", "min", "p10", "mean", "p50", "p90", "max"))]
                 for measure, d in manifest["distributions"].items()]),
        "",
        *(["## Which messages are trained on", "", training, ""] if training else []),
        "## Token lengths",
        "",
        *_token_lines(manifest),
        "",
        "## Configuration",
        "",
        "The curation and pairing settings that made this export (the whole pipeline config is in"
        " `manifest.json`):",
        "",
        "```json",
        orjson.dumps(_relevant_config(manifest), option=orjson.OPT_INDENT_2).decode(),
        "```",
        "",
        "## Sources",
        "",
        *table(["uri", "records", "sha256"], [[s["uri"], s["records"], s["sha256"]] for s in manifest["sources"]]),
        *reward_provenance_lines(manifest["sources"]),
    ]
    return "\n".join(lines) + "\n"


def training_of(export: Any, manifest: dict[str, Any]) -> str | None:
    """What the card says of training targets: the export's setting for the config's ``sft.train_on``."""
    if export.training_setting is None:
        return None
    return export.training_setting(manifest["config"]["sft"]["train_on"])


def _dataset_lines(manifest: dict[str, Any]) -> list[str]:
    """The declared dataset this export belongs to, and the batches it read of each source."""
    dataset = manifest.get("dataset")
    if dataset is None:
        return []
    read = ", ".join(f"`{source['name']}` ({len(source['batches'])} batch(es))" for source in dataset["sources"])
    return [f"- dataset `{dataset['name']}`, from the source(s) {read}"]


def redaction_line(sources: list[dict[str, Any]]) -> str:
    """Whether secrets were replaced before the rows were stored, and by which detector."""
    detectors = sorted({source.get("redaction") for source in sources} - {None})
    unscrubbed = sum(source.get("redaction") is None for source in sources)
    if not detectors:
        return "- secrets: **not redacted** (`redaction.enabled` was false when the sources were ingested)"
    line = f"- secrets: replaced by typed placeholders at ingest, by {'; '.join(detectors)}"
    return line + (f"; **{unscrubbed} source(s) were not redacted**" if unscrubbed else "")


def front_matter(manifest: dict[str, Any]) -> str:
    """The card's YAML header: what the Hub and ``load_dataset`` read.

    ``dataset_info.splits`` (rows and file size per split) is also what makes a re-run visible
    to ``datasets``: it caches a folder whose card has ``configs`` under a hash of the card,
    not of the files, so without it a reload after a re-run would hand back the old rows.
    """
    splits = split_totals(manifest["files"])
    with_rows = [split for split, totals in splits.items() if totals["rows"]] or list(splits)[:1]
    card = manifest["config"]["card"]
    tags = ["trajectory-assets", "agent-trajectories", manifest["config_section"], manifest["export"].replace("_", "-")]
    header = {
        "license": card["license"],
        "tags": list(dict.fromkeys([*tags, *card["tags"]])),
        "configs": [{"config_name": "default",
                     "data_files": [{"split": split, "path": splits[split]["glob"]} for split in with_rows]}],
        "dataset_info": {
            "features": manifest["features"],
            "splits": [{"name": split, "num_bytes": splits[split]["bytes"], "num_examples": splits[split]["rows"]}
                       for split in with_rows],
            "download_size": sum(splits[split]["bytes"] for split in with_rows),
        },
    }
    return "---\n" + yaml.safe_dump(header, sort_keys=False, allow_unicode=True) + "---\n"


def split_totals(files: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Split -> how many files it has, the glob naming them, and their rows and bytes together."""
    splits: dict[str, dict[str, Any]] = {}
    for name, described in files.items():
        split = layout.split_of(name, described)
        totals = splits.setdefault(split, {"files": 0, "rows": 0, "bytes": 0,
                                           "glob": layout.split_files_glob(split, name.rsplit(".", 1)[1])})
        totals["files"] += 1
        totals["rows"] += described["rows"]
        totals["bytes"] += described["bytes"]
    return splits


def _decontamination_lines(manifest: dict[str, Any]) -> list[str]:
    """The evaluation sets the rows were checked against (none: no lines, the card as before)."""
    block = manifest.get("decontamination")
    if not block:
        return []
    return [
        "",
        f"Decontaminated: a trajectory sharing a {block['ngram']}-word n-gram of its user or assistant turns, or a "
        "task id, with one of these evaluation sets was left out (`contaminated:<benchmark>` above):",
        "",
        *table(["benchmark", "file", "sha256", "items", "n-grams", "ids", "left out"],
               [[b["name"], b["path"], b["sha256"][:16], b["items"], b["ngrams"], b["ids"], b["left_out"]]
                for b in block["benchmarks"]]),
    ]


def _token_lines(manifest: dict[str, Any]) -> list[str]:
    budget = manifest["token_budget"]
    if budget["tokenizer"] is None:
        return ["Not measured: no `tokenizer` is configured."]
    tokens = manifest["distributions"]["tokens"]
    limit = (f"budget {budget['max_tokens']} tokens ({manifest['config_section']}.max_tokens, over budget: "
             f"{budget['over_token_budget']}); left out over budget: {budget['left_out']}, cut at a turn "
             f"boundary: {budget['truncated']}") if budget["max_tokens"] else "no budget (max_tokens not set)"
    return [
        f"Each row rendered with the chat template of `{budget['tokenizer']}` and tokenized: "
        f"{MEASURED[manifest['config_section']]}; {limit}.",
        "",
        *table(["rows", "min", "p10", "p50", "p90", "max"],
               [[tokens.get(k, "") for k in ("count", "min", "p10", "p50", "p90", "max")]]),
    ]


def _relevant_config(manifest: dict[str, Any]) -> dict[str, Any]:
    section = manifest["config_section"]
    config = manifest["config"]
    return {section: config[section], "split": config["split"], "tokenizer": config["tokenizer"]}
