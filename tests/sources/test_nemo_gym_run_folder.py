"""A whole NeMo Gym run folder (issue 41, items 3-5): every file a run writes beside its
rollouts is recognised by name and listed as a side file, never read as records.

No public run folder holds every one of these files, so the folder is built from Gym's code
and documentation (NVIDIA-NeMo/Gym at 07d6b0d): the names from ``nemo_gym/path_utils.py`` and
its documented successor ``nemo_gym/utils/path_utils.py`` (``aggregation_sources_path_for``,
``batch_status_path_for``, ``resolved_config_path_for``, ``run_summary_path_for``,
``export_done_path_for``, ``exporter_run_id_path_for``), the health check's reports
(``nemo_gym/health/types.py``: ``quality_summary.json``, ``rollout_verdicts.jsonl``, written
into the results folder), the data processor's ``<dataset>_prepare.jsonl``
(``nemo_gym/train_data_utils.py`` ``_collate_samples_single_type``) and the collated input
under ``<rollouts stem>/preprocessed_datasets/`` (``nemo_gym/cli/eval.py``
``e2e_rollout_collection``); the rows as ``nemo_gym/rollout_collection.py`` writes them.
"""

import json
from pathlib import Path

from tests.conftest import make_rollout, message_item, write_jsonl
from trajectory_assets.ingest.conversion import ingest
from trajectory_assets.io.source_files import discover
from trajectory_assets.sources import FOLDER_RECORDS, INPUTS_SUFFIXES, SIDE_FILES, discover_sources

AGENT = {"type": "responses_api_agents", "name": "math_simple_agent"}


def dataset_row(task: int) -> dict:
    """A prepared dataset row: the request and the agent, no response (train_data_utils.py)."""
    return {"responses_create_params": {"input": [{"role": "user", "content": f"What is {task}+{task}?"}]},
            "expected_answer": str(2 * task), "agent_ref": AGENT}


def rollout(task: int, **extra) -> dict:
    return make_rollout([message_item(str(2 * task))], request_input=f"What is {task}+{task}?",
                        _ng_task_index=task, _ng_rollout_index=0, agent_ref=AGENT, **extra)


def gym_run_folder(root: Path) -> Path:
    """``results/`` as ``gym eval run`` (collection, aggregation, health check, MLflow export) leaves it."""
    results = root / "results"
    write_jsonl(results / "rollouts.jsonl", [rollout(0), rollout(1)])
    write_jsonl(results / "rollouts_materialized_inputs.jsonl",
                [{**dataset_row(task), "_ng_task_index": task, "_ng_rollout_index": 0} for task in range(3)])
    # a failed attempt goes to the failures sidecar with its class (rollout_collection.py)
    write_jsonl(results / "rollouts_failures.jsonl",
                [{**rollout(2), "_ng_failure_class": "timeout", "_ng_failure_terminal": True}])
    (results / "rollouts_aggregate_metrics.json").write_text(json.dumps([{"agent_ref": AGENT,
                                                                          "agent_metrics": {"mean/reward": 1.0}}]))
    (results / "rollouts_sources.json").write_text(json.dumps({"shards": []}))
    (results / "rollouts_batch_status.json").write_text(json.dumps({"status": "complete"}))
    (results / "rollouts_resolved_config.yaml").write_text("math_simple_agent:\n  responses_api_agents: {}\n")
    (results / "rollouts_run_summary.json").write_text(json.dumps({"files": {}}))
    (results / "rollouts_mlflow_export_done").write_text("")
    (results / "rollouts_mlflow_run_id").write_text("0123abcd\n")
    (results / "quality_summary.json").write_text(json.dumps({"checked": 2, "healthy": 2}))
    write_jsonl(results / "rollout_verdicts.jsonl",
                [{"_ng_task_index": task, "_ng_rollout_index": 0, "verdict": "healthy"} for task in range(2)])
    write_jsonl(results / "train_prepare.jsonl", [dataset_row(task) for task in range(3)])
    (results / "train_metrics.json").write_text("{}")
    write_jsonl(results / "rollouts" / "preprocessed_datasets" / "train.jsonl", [dataset_row(task) for task in range(3)])
    (results / "rollouts" / "preprocessed_datasets" / "train_metrics.json").write_text("{}")
    return results


def test_a_whole_gym_run_folder_lists_every_run_file_as_a_side_file(tmp_path):
    results = gym_run_folder(tmp_path)
    found = discover_sources([str(results)])
    assert [Path(source.uri).name for source in found] == ["rollouts.jsonl", "rollouts_failures.jsonl"]
    rollouts = found[0]
    assert Path(rollouts.inputs_uri).name == "rollouts_materialized_inputs.jsonl"
    assert sorted(Path(uri).relative_to(results).as_posix() for uri in rollouts.side_uris) == [
        "quality_summary.json", "rollout_verdicts.jsonl", "rollouts/preprocessed_datasets/train.jsonl",
        "rollouts/preprocessed_datasets/train_metrics.json", "rollouts_aggregate_metrics.json",
        "rollouts_batch_status.json", "rollouts_mlflow_export_done", "rollouts_mlflow_run_id",
        "rollouts_resolved_config.yaml", "rollouts_run_summary.json", "rollouts_sources.json",
        "train_prepare.jsonl"]


def test_a_whole_gym_run_folder_quarantines_nothing_that_is_not_a_rollout_line(tmp_path):
    results = gym_run_folder(tmp_path)
    rejected: list[dict] = []
    summary = ingest(discover_sources([str(results)]), lambda table: None, rejected.extend)
    assert summary.records_valid == 2 and summary.reconciles
    # the one quarantined row is the failures sidecar's failed attempt, under its class
    assert [(Path(row["source"]).name, row["reason"]) for row in rejected] == [
        ("rollouts_failures.jsonl", "ng_failure_timeout")]


def test_a_run_file_named_alone_beside_its_rollouts_is_not_read(tmp_path):
    results = gym_run_folder(tmp_path)
    for name in ("rollout_verdicts.jsonl", "train_prepare.jsonl", "rollouts/preprocessed_datasets/train.jsonl"):
        assert discover([str(results / name)], INPUTS_SUFFIXES, SIDE_FILES, FOLDER_RECORDS) == []
    alone = discover([str(results / "rollouts.jsonl")], INPUTS_SUFFIXES, SIDE_FILES, FOLDER_RECORDS)
    assert "train_prepare.jsonl" in {Path(uri).name for uri in alone[0].side_uris}


def test_run_files_without_rollouts_beside_them_are_read_as_sources(tmp_path):
    """A file that only looks like a run file is never skipped: without a source beside it,
    it is read (and a dataset row is quarantined as no rollout)."""
    lone = write_jsonl(tmp_path / "data" / "train_prepare.jsonl", [dataset_row(0)])
    found = discover_sources([str(lone.parent)])
    assert [Path(source.uri).name for source in found] == ["train_prepare.jsonl"]


# Gym's observability record and its row keys (issue 41, item 3) ------------------------------

from trajectory_assets.chat.trajectory import Rejection  # noqa: E402
from trajectory_assets.sources import convert_record  # noqa: E402

PROMPT_PAYLOAD = "What is 1+1? (the prompt, as the model call's request holds it)"


def observed_rollout(**extra) -> dict:
    """A rollout as rollout_collection.py writes it once ``_attach_trajectory_record`` ran: the
    TrajectoryRecord (rollout_observability.py, schema_version "1.0") with a root invocation and
    a subagent, a turn, a tool call, a model call with its full payload and a gap; the agent's
    AgentObservationBundle with a context compaction and a sandbox; the capture's calls
    (their payloads stripped by ``_strip_capture_payloads``) and its gaps."""
    model_call = {"model_call_id": "mc-1", "request": {"input": [{"role": "user", "content": PROMPT_PAYLOAD}]},
                  "response": {"output": [{"type": "message", "role": "assistant", "content": "2"}]},
                  "response_metadata": {"model": "m"}, "token_stats": {"prompt_tokens": 12}}
    row = rollout(1, **extra)
    row["ng_trajectory"] = {
        "schema_version": "1.0", "task_id": "1", "rollout_id": "1-0",
        "invocations": [{"kind": "agent_invocation", "invocation_id": "root", "status": "completed",
                         "conversation": [{"role": "user", "content": PROMPT_PAYLOAD}]},
                        {"kind": "agent_invocation", "invocation_id": "sub", "parent_invocation_id": "root",
                         "spawned_by_tool_call_id": "t-1", "status": "completed"}],
        "turns": [{"invocation_id": "root", "task_id": "1", "rollout_id": "1-0", "turn_no": 1, "timestamp": 1.0,
                   "step_count": 1, "model_calls": [{"model_call_id": "mc-1"}]}],
        "model_calls": [model_call],
        "tool_calls": [{"kind": "tool_call", "invocation_id": "root", "tool_call_id": "t-1", "output": "ok"}],
        "gaps": [{"code": "turns_unavailable", "invocation_id": "sub"}],
    }
    row["ng_agent_observations"] = {
        "source": "openhands",
        "records": [{"kind": "context_compaction", "invocation_id": "root", "trigger": "token_limit",
                     "tokens_before": 120000, "tokens_after": 8000, "outcome": "completed",
                     "summary": "the earlier turns, summarized", "model_calls": [{"model_call_id": "mc-0"}]},
                    {"kind": "sandbox", "role": "agent", "outcome": "completed", "exit_code": 0}],
        "gaps": [{"code": "model_call_reference_unmatched", "invocation_id": "root", "detail": "mc-0"}],
    }
    row["ng_model_call_capture"] = {"calls": [{"model_call_id": "mc-1", "tokens_in": 12}],
                                    "gaps": [{"code": "turns_unavailable"}]}
    return row


def convert(row: dict):
    return convert_record(json.dumps(row).encode(), source_id="results/rollouts.jsonl")


def test_the_observability_record_is_summarized_not_copied_into_metadata():
    trajectory = convert(observed_rollout())
    metadata = json.dumps(trajectory.metadata)
    assert PROMPT_PAYLOAD not in metadata  # no second copy of the prompt
    assert not {"ng_trajectory", "ng_agent_observations", "ng_model_call_capture"} & set(trajectory.metadata)
    observed = trajectory.metadata["ng_observability"]
    assert {key: observed[key] for key in ("schema_version", "invocations", "subagents", "turns", "tool_calls",
                                           "model_calls")} == {
        "schema_version": "1.0", "invocations": 2, "subagents": 1, "turns": 1, "tool_calls": 1, "model_calls": 1}
    assert observed["gaps"] == ["turns_unavailable", "model_call_reference_unmatched"]
    assert observed["compactions"] == [{"invocation_id": "root", "trigger": "token_limit", "tokens_before": 120000,
                                        "tokens_after": 8000, "outcome": "completed",
                                        "summary": "the earlier turns, summarized"}]
    assert observed["sandboxes"] == [{"role": "agent", "outcome": "completed", "exit_code": 0}]


def test_a_context_compaction_flags_the_run_compressed_and_gaps_flag_it_too():
    assert {"compressed", "observability_gap"} <= set(convert(observed_rollout()).quality_flags)
    plain = rollout(1)
    assert not {"compressed", "observability_gap"} & set(convert(plain).quality_flags)


def test_the_token_capture_error_is_the_reason_behind_mask_sample():
    """token_id_capture/delivery.py ``_unusable``: mask_sample and ``_ng_token_capture.error``."""
    row = rollout(1, mask_sample=True, _ng_token_capture={"n_calls": 0, "error": "no rollout id"})
    trajectory = convert(row)
    assert trajectory.mask_sample and trajectory.metadata["mask_reason"] == "no rollout id"
    assert trajectory.metadata["_ng_token_capture"] == {"n_calls": 0, "error": "no rollout id"}
    assert "mask_reason" not in convert(rollout(1, _ng_token_capture={"n_calls": 3})).metadata


def test_failure_keys_become_the_reasons_of_the_failed_attempt():
    """judge.py ``judge_failsafe``: class judge_failed with the judge's error; rollout_collection.py:
    ``_ng_failure_terminal`` (never retried), ``_ng_no_persist`` (written nowhere)."""
    judged = {**rollout(1), "reward": 0.0, "_ng_failure_class": "judge_failed",
              "_ng_failure_judge_error": "401 Unauthorized", "_ng_failure_terminal": True}
    try:
        convert(judged)
    except Rejection as rejection:
        assert rejection.reason == "ng_failure_judge_failed"
        assert "terminal" in rejection.detail and "401 Unauthorized" in rejection.detail
    else:
        raise AssertionError("a judge failure became a trajectory")
    try:
        convert({**rollout(1), "_ng_no_persist": True})
    except Rejection as rejection:
        assert rejection.reason == "ng_no_persist"
    else:
        raise AssertionError("a row Gym writes nowhere became a trajectory")


def test_skills_ref_stays_with_the_trajectory():
    """skills.py: the run-level skills a rollout ran with, stamped for provenance/grouping."""
    skills = {"path": "skills/", "hash": "ab12", "skills": [{"name": "search"}]}
    assert convert(rollout(1, skills_ref=skills)).metadata["skills_ref"] == skills


# Re-verification (issue 41, item 5) and reward provenance (item 6) ----------------------------

import hashlib  # noqa: E402

from trajectory_assets.config import ConversionConfig  # noqa: E402
from trajectory_assets.exports.curation import superseded_copies  # noqa: E402


def reverify_folder(root: Path) -> Path:
    """``results/`` after ``gym eval run`` and two ``gym eval reverify`` runs, named as the reverify
    tutorial names them (fern/.../evaluation-tutorials/reverify-rollouts.mdx): a safe one, and a
    forced one (``--force``: ``unsafe_`` prefix, rollout_reverification.py ``_prepare_output_fpaths``).
    Reverify rows are the verify responses with the task and rollout indices, ``agent_ref`` and
    ``skills_ref`` put back, and no ``_ng_rollout_id``; their inputs stay in the original
    ``_materialized_inputs`` file; metrics go to ``<output>_aggregate_metrics.json``."""
    results = root / "results"
    skills = {"path": "skills/", "hash": "ab12", "skills": []}
    originals = [rollout(task, reward=0.0, _ng_rollout_id=f"{task}-0", skills_ref=skills) for task in range(2)]
    write_jsonl(results / "rollouts.jsonl", originals)
    write_jsonl(results / "rollouts_materialized_inputs.jsonl",
                [{**dataset_row(task), "_ng_task_index": task, "_ng_rollout_index": 0} for task in range(2)])
    (results / "rollouts_resolved_config.yaml").write_text("math_simple_agent:\n  grading_mode: strict\n")

    def reverified(row: dict, reward: float) -> dict:
        row = {key: value for key, value in row.items() if key != "_ng_rollout_id"}
        return {**row, "reward": reward, "expected_answer": "2",
                "judge_evaluations": [{"responses_create_params": {"input": "judge this"},
                                       "response": {"model": "judge-model-1", "output": []}}]}

    write_jsonl(results / "rollouts_lenient_reverified.jsonl", [reverified(row, 1.0) for row in originals])
    (results / "rollouts_lenient_reverified_aggregate_metrics.json").write_text("[]")
    write_jsonl(results / "unsafe_rollouts_strict_reverified.jsonl", [reverified(originals[0], 0.5)])
    return results


def test_reverify_outputs_are_joined_to_the_original_inputs(tmp_path):
    results = reverify_folder(tmp_path)
    found = {Path(source.uri).name: source for source in discover_sources([str(results)])}
    assert sorted(found) == ["rollouts.jsonl", "rollouts_lenient_reverified.jsonl",
                             "unsafe_rollouts_strict_reverified.jsonl"]
    for name in found:
        assert Path(found[name].inputs_uri).name == "rollouts_materialized_inputs.jsonl"
    assert [Path(uri).name for uri in found["rollouts_lenient_reverified.jsonl"].side_uris] == [
        "rollouts_lenient_reverified_aggregate_metrics.json"]


def ingested(results: Path, **options):
    import pyarrow as pa

    tables, rejected = [], []
    ingest(discover_sources([str(results)]), tables.append, rejected.extend, options=ConversionConfig(**options))
    return pa.concat_tables(tables).to_pandas(), rejected


def test_a_forced_reverification_is_read_only_when_the_config_allows_it(tmp_path):
    results = reverify_folder(tmp_path)
    table, rejected = ingested(results)
    assert [(Path(row["source"]).name, row["reason"]) for row in rejected] == [
        ("unsafe_rollouts_strict_reverified.jsonl", "ng_reverify_unsafe")]
    assert len(table) == 4
    table, rejected = ingested(results, read_unsafe_reverified=True)
    assert rejected == [] and len(table) == 5
    forced = table.loc[table["source_id"].str.endswith("unsafe_rollouts_strict_reverified.jsonl")]
    assert json.loads(forced["reward_provenance"].iloc[0])["forced"] is True


def test_reward_provenance_names_the_verifier_the_judges_the_config_and_the_reverification(tmp_path):
    results = reverify_folder(tmp_path)
    table, _ = ingested(results)
    provenance = {Path(uri).name: json.loads(text) for uri, text in zip(table["source_uri"], table["reward_provenance"])}
    config_sha = hashlib.sha256((results / "rollouts_resolved_config.yaml").read_bytes()).hexdigest()
    assert provenance["rollouts.jsonl"] == {
        "verifier": "math_simple_agent", "judge_models": [], "reverified": False, "forced": False, "reverifies": None,
        "resolved_config": {"name": "rollouts_resolved_config.yaml", "sha256": config_sha}}
    assert provenance["rollouts_lenient_reverified.jsonl"] == {
        "verifier": "math_simple_agent", "judge_models": ["judge-model-1"], "reverified": True, "forced": False,
        "reverifies": "results/rollouts.jsonl", "resolved_config": None}
    # the re-verified rows were joined to the original inputs by task and rollout index
    reverified = table.loc[table["source_id"] == "results/rollouts_lenient_reverified.jsonl"]
    assert [json.loads(text)["expected_answer"] for text in reverified["task_inputs"]] == ["0", "2"]


def test_a_rollout_read_twice_is_kept_once_the_reverified_reward_by_default(tmp_path):
    results = reverify_folder(tmp_path)
    table, _ = ingested(results)
    superseded = superseded_copies(table, "reverified")
    kept = table.loc[~table["trajectory_id"].isin(superseded)]
    assert len(superseded) == 2 and sorted(kept["reward"]) == [1.0, 1.0]
    original = superseded_copies(table, "original")
    assert sorted(table.loc[~table["trajectory_id"].isin(original), "reward"]) == [0.0, 0.0]

