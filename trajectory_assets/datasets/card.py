"""Dataset cards: a README beside each export, rendered from its manifest alone.

A card says what a trainer is about to consume: how many rows, which filters and pairing
made them, what was left out and why, the reward and length distributions, and the
sources, so nobody has to read the pipeline to know what is in a file.
"""

from __future__ import annotations

from typing import Any

import orjson

from trajectory_assets.datasets.markdown import table

# what each export is, in a trainer's words
PURPOSE = {
    "sft": "Supervised fine-tuning conversations in OpenAI Chat Completions form (the NeMo Gym seed SFT format).",
    "sft_hermes": "The SFT conversations rendered as Hermes Agent ShareGPT (`<think>`, `<tool_call>`, "
                  "`<tool_response>` markup and the function-calling system prompt).",
    "dpo": "Preference pairs `{prompt, chosen, rejected}` from rollouts of the same task (the seed DPO format).",
    "grpo": "One NeMo Gym RL input per task `{responses_create_params, agent_ref}` (the seed GRPO format).",
    "trl_sft": "TRL conversational SFT: `messages` plus a `tools` JSON string (`trl.SFTTrainer`).",
    "trl_dpo": "TRL explicit-prompt conversational preferences `{prompt, chosen, rejected}` plus `tools` "
               "(`trl.DPOTrainer`).",
    "trl_grpo": "TRL prompt-only rows `{prompt}`; every other column reaches the reward functions "
                "(`trl.GRPOTrainer`).",
    "verl": "verl RL Parquet: `data_source`, `prompt`, `ability`, `reward_model`, `extra_info`.",
    "llama_factory": "LLaMA-Factory ShareGPT with `system` and `tools` columns, registered in "
                     "`dataset_info.json`.",
}


def render_card(manifest: dict[str, Any]) -> str:
    name = manifest["export"]
    rows = manifest["rows"]
    lines = [
        f"# {name}",
        "",
        PURPOSE.get(name, ""),
        "",
        f"- rows: **{sum(rows.values())}** (train {rows.get('train', 0)}, validation {rows.get('validation', 0)});"
        f" format: {manifest['format']}",
        f"- made by trajectory-assets {manifest['code_version']} from {len(manifest['sources'])} source file(s)"
        f" in {len(manifest['batches'])} batch(es); the split is by prompt, so no prompt is in both splits",
        redaction_line(manifest["sources"]),
        "",
        "## Files",
        "",
        *table(["file", "rows", "bytes", "sha256"],
                [[f, d["rows"], d["bytes"], d["sha256"]] for f, d in manifest["files"].items()]),
        "",
        "## Left out, and why",
        "",
        *table(["reason", "count"], list(manifest["excluded"].items())),
        "",
        "## Distributions of the exported rows",
        "",
        *table(["measure", "count", "min", "p10", "mean", "p50", "p90", "max"],
                [[measure, *(d.get(k, "") for k in ("count", "min", "p10", "mean", "p50", "p90", "max"))]
                 for measure, d in manifest["distributions"].items()]),
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
    ]
    return "\n".join(lines) + "\n"


def redaction_line(sources: list[dict[str, Any]]) -> str:
    """Whether secrets were replaced before the rows were stored, and by which detector."""
    detectors = sorted({source.get("redaction") for source in sources} - {None})
    unscrubbed = sum(source.get("redaction") is None for source in sources)
    if not detectors:
        return "- secrets: **not redacted** (`redaction.enabled` was false when the sources were ingested)"
    line = f"- secrets: replaced by typed placeholders at ingest, by {'; '.join(detectors)}"
    return line + (f"; **{unscrubbed} source(s) were not redacted**" if unscrubbed else "")


def _relevant_config(manifest: dict[str, Any]) -> dict[str, Any]:
    section = manifest["config_section"]
    return {section: manifest["config"][section], "split": manifest["config"]["split"]}
