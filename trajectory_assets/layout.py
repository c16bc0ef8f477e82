"""Where each asset's files live under the storage root (the documented output layout).

Per-batch assets (one dynamic partition per source file) write under ``*/batches/<key>``;
the cross-batch assets read every registered batch and write the datasets and reports.
"""

BATCH_PARTITIONS = "rollout_batches"
# the folders of the batches' own files (``batch_source`` ... ``batch_quarantine``), each named
# ``<batch key>.<suffix>``: they live in the storage of the batch's source
BATCH_FOLDERS = ("raw/batches/", "trajectories/batches/", "quarantine/batches/")
REPORTS = "reports"
STATS_JSON = "reports/stats.json"
STATS_MARKDOWN = "reports/stats.md"
REPORT_PAGE = "reports/index.html"  # plots, a trajectory viewer, quarantine examples
TASKS = "reports/tasks.jsonl"  # per task: rollouts, passes, mean reward, pass@k
QUARANTINE = "quarantine/rejected.jsonl"  # every batch's rejected records together


def report_file(name: str) -> str:
    """A file of the report beside stats.md (its plots: ``plots/<name>.png``)."""
    return f"{REPORTS}/{name}"


def batch_source(key: str) -> str:
    return f"raw/batches/{key}.json"


def batch_trajectories(key: str) -> str:
    return f"trajectories/batches/{key}.parquet"


def batch_summary(key: str) -> str:
    return f"trajectories/batches/{key}.summary.json"


def batch_decontamination(key: str, fingerprint: str) -> str:
    """The benchmark matches found in a batch against one benchmark set (a dataset's
    ``decontamination`` section), with that set's fingerprint: one file per set, so the
    datasets reading one source keep each their own (written only when one is configured)."""
    return f"{batch_decontamination_folder(key)}/{fingerprint[:16]}.json"


def batch_decontamination_folder(key: str) -> str:
    """Every benchmark set's matches of a batch (ingest empties it: none may outlive the
    trajectories they were found in)."""
    return f"trajectories/batches/{key}.decontamination"


def batch_decontamination_before_sets(key: str) -> str:
    """The one flags file a batch had before they were kept per benchmark set: still read
    while its fingerprint is the one wanted (a storage written before keeps its flags, no
    batch is scanned again), never written; ingest removes it with the folder."""
    return f"trajectories/batches/{key}.decontamination.json"


def batch_tool_use(key: str) -> str:
    """Each trajectory's calls and failed results per tool, counted by ingest (what the report
    counts, ``report/tool_use.py``)."""
    return f"trajectories/batches/{key}.tool_use.json"


def batch_near_signatures(key: str) -> str:
    """Each trajectory's MinHash signature, what ``dedup: near`` compares (Parquet; written by
    ingest only when a dataset reading the batch's source uses it, ``ingest/near_signatures.py``)."""
    return f"trajectories/batches/{key}.minhash.parquet"


def batch_quarantine(key: str) -> str:
    return f"quarantine/batches/{key}.jsonl"


def export_folder(export: str) -> str:
    """One export's folder: its splits, manifest, card and index files (a Hub-ready dataset)."""
    return f"exports/{export}"


def export_split_file(export: str, file_name: str) -> str:
    """One of an export's data files, by the name its manifest lists: a shard of a split,
    ``split_file_name`` (``train.jsonl`` in a manifest written before shards)."""
    return f"{export_folder(export)}/{file_name}"


def split_file_name(split: str, index: int, count: int, file_format: str) -> str:
    """The Hub's name of a split's ``index``-th file of ``count`` (``train-00000-of-00004.parquet``,
    as ``datasets``' ``push_to_hub`` names them), so the files sort in the order of their rows."""
    return f"{split}-{index:05d}-of-{count:05d}.{file_format}"


def export_manifest(export: str) -> str:
    return f"{export_folder(export)}/manifest.json"


def export_card(export: str) -> str:
    return f"{export_folder(export)}/README.md"


def split_of(file_name: str, described: dict) -> str:
    """The split of a file an export manifest lists: its ``split`` (a manifest written before
    shards names one file per split, ``train.jsonl``, and no ``split``)."""
    return described.get("split") or file_name.rsplit(".", 1)[0]


def split_files_glob(split: str, file_format: str) -> str:
    """Every file of a split, as a dataset card's ``data_files`` names them (the Hub's own
    ``push_to_hub`` writes ``data/train-*``): ``datasets`` reads the matches in name order."""
    return f"{split}-*.{file_format}"


def legacy_row_indexes(export: str) -> str:
    """Where builds before summaries kept each JSON-lines file's row index (what the report
    scanned instead of the lines): nothing reads it now, and a commit removes it."""
    return f"indexes/{export}"


def export_summary(export: str) -> str:
    """What the report reads of an export instead of its rows (``exports/export_scan.py``),
    written by the export's merge. Outside the export's folder, which stays the dataset
    trainers load."""
    return f"summaries/{export}.json"


def export_parts(export: str) -> str:
    """The tally of each shard of an export's committed build (``writer.ExportPart``), kept so
    that a refresh reuses a shard whose input has not changed. Outside the export's folder,
    which stays the dataset trainers load."""
    return f"parts/{export}"


def export_part(export: str, shard: int) -> str:
    return f"{export_parts(export)}/{shard:05d}.pickle"


def export_staging(export: str, run: str) -> str:
    """Where the shards of one build (``run``) of an export are written before a commit puts
    them in place: in the run's staging folder, outside the export's folder, so a build that
    dies leaves nothing a loader of the folder would read."""
    return f"{staging_run(run)}/files/{export}"


def export_extra(export: str, name: str) -> str:
    """A trainer's own index file beside the data (LLaMA-Factory's dataset_info.json)."""
    return f"{export_folder(export)}/{name}"


def staging_run(run: str) -> str:
    """What one run's export and report steps hand each other (plans, each shard's part of each
    export, its staged files, the report's part over the trajectories, the steps' small
    outputs), under the dataset's root: removed once the run is over (``defs/staging.py``)."""
    return f"staging/{run}"


def staging_plan(run: str, family: str) -> str:
    return f"{staging_run(run)}/plans/{family}.pickle"


def staging_part(run: str, export: str, shard: int) -> str:
    """What the checks and the manifest need of one shard's rows of an export (``writer.ShardPart``)."""
    return f"{staging_run(run)}/parts/{export}/{shard:05d}.pickle"


def staging_report(run: str) -> str:
    """The report's part over the trajectories, for its part over the exports (``report/report.py``)."""
    return f"{staging_run(run)}/report"


def staging_value(run: str, step: str, output: str) -> str:
    """A step's output handed to the next step (small JSON)."""
    return f"{staging_run(run)}/values/{step}/{output}.json"
