"""Where each asset's files live under the storage root (the documented output layout)."""

SOURCE_INVENTORY = "raw/sources.json"
TRAJECTORIES = "trajectories/trajectories.parquet"
INGEST_SUMMARY = "trajectories/ingest_summary.json"
QUARANTINE = "quarantine/rejected.jsonl"
REPORTS = "reports"
STATS_JSON = "reports/stats.json"
STATS_MARKDOWN = "reports/stats.md"
REWARD_PLOT = "reports/reward_histogram.png"
EXPORT_NAMES = ("sft", "dpo", "grpo")


def export_file(export: str, split: str) -> str:
    return f"exports/{export}/{split}.jsonl"


def export_manifest(export: str) -> str:
    return f"exports/{export}/manifest.json"
