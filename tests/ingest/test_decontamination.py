"""Benchmark decontamination: a trajectory sharing a 13-gram of its user or assistant turns, or
its task id, with a configured evaluation set is left out of every export, named in the
manifest; near-misses behave as NeMo Curator / datatrove define them; every benchmark form
loads; zero benchmarks change nothing."""

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.conftest import call_item, make_rollout, message_item, output_item, trajectory_frame
from tests.exports.rendering import build
from trajectory_assets.config import (
    ConfigError,
    DecontaminationConfig,
    DpoConfig,
    GrpoConfig,
    PipelineConfig,
    SftConfig,
    SplitConfig,
    load_config,
)
from trajectory_assets.ingest.decontamination import (
    MIN_WORDS,
    BenchmarkError,
    BenchmarkIndex,
    BenchmarkSummary,
    build_index,
    normalise,
    words,
)
from trajectory_assets.exports.families.frames import FrameTable
from trajectory_assets.exports.registry import family_exports
from trajectory_assets.exports.shard_phase import write_exports
from trajectory_assets.exports.writer import Written
from trajectory_assets.io.storage import Storage

ALL_TRAIN = SplitConfig(validation_fraction=0.0)
QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
            "How many clips did Natalia sell altogether in April and May?")
# 13 consecutive words of QUESTION, in other casing, punctuation and numbers
PLANTED = "Before we start: NATALIA sold clips to 12 of her friends in april; and then she sold half..."
FAMILIES = {"sft": SftConfig(min_reward=None), "dpo": DpoConfig(), "grpo": GrpoConfig(default_agent_ref="agent")}


def benchmark_file(tmp_path, rows=None, name="gsm.jsonl"):
    rows = rows if rows is not None else [{"question": QUESTION, "instance_id": "gsm-7"},
                                          {"question": "What is the capital of France?", "instance_id": "gsm-8"}]
    path = tmp_path / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def broken_file(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("{not json\n")
    return path


def index(tmp_path, *benchmarks, ngram=13):
    benchmarks = benchmarks or ({"name": "gsm8k", "path": str(benchmark_file(tmp_path)),
                                 "text_fields": ["question"], "id_field": "instance_id"},)
    return build_index(DecontaminationConfig.model_validate({"benchmarks": list(benchmarks), "ngram": ngram}))


def task(index_, prompt, answers=("A", "B"), **extra):
    """Two rollouts of one task (rewards 1 and 0): one SFT row, one DPO pair, one GRPO task."""
    return [make_rollout([message_item(answer)], request_input=prompt, reward=reward, _ng_task_index=index_, **extra)
            for answer, reward in zip(answers, (1.0, 0.0))]


def exported(frame, benchmarks):
    """Per family: (trajectory ids written, exclusions)."""
    result = {}
    for family, config in FAMILIES.items():
        out = build(family, frame, config, ALL_TRAIN, benchmarks=benchmarks)
        ids = set()
        for record in out.records:
            ids.update(record.get("trajectory_ids") or [record.get(k) for k in ("trajectory_id", "chosen_id",
                                                                                 "rejected_id") if record.get(k)])
        result[family] = ids, dict(out.excluded)
    return result


def ids_of(frame, task_index):
    return set(frame.loc[frame["task_index"] == task_index, "trajectory_id"])


def test_a_planted_13_gram_in_a_user_turn_leaves_every_family(tmp_path):
    frame = trajectory_frame([*task(0, PLANTED), *task(1, "Something unrelated entirely.")])
    for family, (written, excluded) in exported(frame, index(tmp_path)).items():
        assert written == ids_of(frame, 1), family
        assert excluded == {"contaminated:gsm8k": 2}, family
    # without decontamination both tasks are exported
    assert all(written == set(frame["trajectory_id"]) for written, _ in exported(frame, None).values())


def test_a_benchmark_id_carried_by_a_rollout_leaves_every_family(tmp_path):
    """SWE-bench style: the rollout's top-level instance_id (kept in its metadata)."""
    frame = trajectory_frame([*task(0, "Fix the bug in jq.", instance_id="gsm-7"),
                              *task(1, "Fix the other bug.", instance_id="other-1")])
    for family, (written, excluded) in exported(frame, index(tmp_path)).items():
        assert written == ids_of(frame, 1) and excluded == {"contaminated:gsm8k": 2}, family


def test_ids_are_found_in_the_request_metadata_and_at_a_dotted_path(tmp_path):
    path = benchmark_file(tmp_path, [{"instance_id": "astropy__astropy-12907", "task": {"id": 50}}])
    by_request = {"name": "swe", "path": str(path), "id_field": "instance_id"}
    by_task = {"name": "tau", "path": str(path), "id_field": "task.id", "task_id_field": "task.id"}
    frame = trajectory_frame([
        make_rollout(request_input="Fix it.", _ng_task_index=0),
        make_rollout(request_input="Book a flight.", _ng_task_index=1, task={"id": 50}),
        make_rollout(request_input="Book a hotel.", _ng_task_index=2, task={"id": 51}),
    ])
    request = orjson.loads(frame.loc[0, "request"])
    frame.loc[0, "request"] = orjson.dumps({**request, "metadata": {"instance_id": "astropy__astropy-12907"}}).decode()
    out = build("sft", frame, SftConfig(), ALL_TRAIN, benchmarks=index(tmp_path, by_request, by_task))
    assert out.excluded == {"contaminated:swe": 1, "contaminated:tau": 1}
    assert [record["trajectory_id"] for record in out.records] == [frame.loc[2, "trajectory_id"]]


def test_an_id_in_the_materialized_inputs_matches(tmp_path):
    frame = trajectory_frame([make_rollout(request_input="Fix it.", _ng_task_index=0)])
    frame.loc[0, "task_inputs"] = orjson.dumps({"instance_id": "gsm-8"}).decode()
    assert build("sft", frame, SftConfig(), ALL_TRAIN, benchmarks=index(tmp_path)).excluded == {
        "contaminated:gsm8k": 1}


def test_assistant_answers_count_system_prompts_and_tool_results_do_not(tmp_path):
    benchmarks = index(tmp_path)
    in_answer = [message_item(f"Sure. {PLANTED}")]
    in_call = [call_item("solve", json.dumps({"problem": PLANTED}), "c1"), output_item("c1", "72"),
               message_item("72")]
    in_tool_result = [call_item("read", "{}", "c1"), output_item("c1", PLANTED), message_item("72")]
    in_system = [{"role": "system", "content": PLANTED}, {"role": "user", "content": "Hello."}]
    frame = trajectory_frame([make_rollout(in_answer, _ng_task_index=0), make_rollout(in_call, _ng_task_index=1),
                              make_rollout(in_tool_result, _ng_task_index=2),
                              make_rollout(request_input=in_system, _ng_task_index=3)])
    assert frame["messages"].map(lambda m: PLANTED in m).all()
    out = build("sft", frame, SftConfig(exclude_unanswered_tool_calls=False), ALL_TRAIN, benchmarks=benchmarks)
    assert out.excluded == {"contaminated:gsm8k": 2}
    assert {record["trajectory_id"] for record in out.records} == set(frame.loc[[2, 3], "trajectory_id"])


@pytest.mark.parametrize("text, matches", [
    # the same 13 words, cased, punctuated and numbered otherwise (datatrove's normalisation)
    ("NATALIA SOLD CLIPS TO 12 OF HER FRIENDS IN APRIL AND THEN SHE SOLD", True),
    ("natalia... sold clips -- to 48 of her friends in \"April\"!! and then she sold", True),
    ("Natalia\tsold\nclips to 48\u00a0of her friends in April, and then she sold", True),
    ("Natália sold clips to 4,800 of her friends in Ápril, and then she sold", True),
    # 12 shared words, then a different one: no 13-gram
    ("Natalia sold clips to 48 of her friends in April, and then he", False),
    ("Natalia sold clips to 48 of her friends in April, and then", False),
    # a word cut by punctuation is two words (datatrove; NeMo Curator would delete it and join them)
    ("Natalia sold cl-ips to 48 of her friends in April, and then she sold", False),
    # a word dropped in the middle
    ("Natalia sold clips to 48 of friends in April, and then she sold half as", False),
])
def test_near_misses_follow_the_normaliser(tmp_path, text, matches):
    frame = trajectory_frame([make_rollout(request_input=text)])
    out = build("sft", frame, SftConfig(), ALL_TRAIN, benchmarks=index(tmp_path))
    assert (out.excluded == {"contaminated:gsm8k": 1}) is matches


def test_the_normaliser_is_datatroves():
    # the research notes' run of datatrove's simplify_text on this text (spaCy's English
    # tokenizer then splits on the spaces)
    text = "Q: What's the Capital of France, in 2024?  Café — Paris!\nAnswer: 3.14 apples on Monday."
    assert " ".join(words(text)) == "q what s the capital of france in 0 cafe paris answer 0 apples on monday"


def test_short_benchmark_texts_match_whole_from_eight_words(tmp_path):
    """NeMo Curator: a task text of 8-12 words is one n-gram of its length; shorter ones are ignored."""
    path = benchmark_file(tmp_path, [{"q": "Which planet in our solar system has the most moons?"},  # 10 words
                                     {"q": "Who wrote Hamlet and Macbeth first?"}])  # 6 words
    benchmarks = index(tmp_path, {"name": "trivia", "path": str(path), "text_fields": ["q"]})
    assert benchmarks.counted()[0].ngrams == 1
    frame = trajectory_frame([make_rollout(request_input="Quiz: which planet in our solar system has the most moons?"),
                              make_rollout(request_input="which planet in our solar system has the moons"),
                              make_rollout(request_input="Who wrote Hamlet and Macbeth first?")])
    out = build("sft", frame, SftConfig(), ALL_TRAIN, benchmarks=benchmarks)
    assert out.excluded == {"contaminated:trivia": 1}
    assert frame.loc[0, "trajectory_id"] not in {record["trajectory_id"] for record in out.records}


def test_the_first_benchmark_in_config_order_names_a_match(tmp_path):
    first = {"name": "first", "path": str(benchmark_file(tmp_path, name="a.jsonl")), "text_fields": ["question"]}
    second = {"name": "second", "path": str(benchmark_file(tmp_path, name="b.jsonl")), "text_fields": ["question"],
              "id_field": "instance_id"}
    frame = trajectory_frame([make_rollout(request_input=PLANTED, _ng_task_index=0),
                              make_rollout(request_input="x", _ng_task_index=1, instance_id="gsm-8")])
    out = build("sft", frame, SftConfig(), ALL_TRAIN, benchmarks=index(tmp_path, first, second))
    assert out.excluded == {"contaminated:first": 1, "contaminated:second": 1}


def test_a_different_ngram_size(tmp_path):
    frame = trajectory_frame([make_rollout(request_input="natalia sold clips to 48 of her friends")])  # 8 words
    config = {"name": "gsm8k", "path": str(benchmark_file(tmp_path)), "text_fields": ["question"]}
    assert build("sft", frame, SftConfig(), ALL_TRAIN, benchmarks=index(tmp_path, config, ngram=8)).excluded == {
        "contaminated:gsm8k": 1}
    assert not build("sft", frame, SftConfig(), ALL_TRAIN, benchmarks=index(tmp_path, config, ngram=9)).excluded


def saved_forms(tmp_path):
    """The same two benchmark rows as JSON lines, Parquet, a saved Dataset and a saved DatasetDict."""
    datasets = pytest.importorskip("datasets")
    rows = [{"question": QUESTION, "instance_id": "gsm-7"}, {"question": "Other text.", "instance_id": "gsm-8"}]
    jsonl = benchmark_file(tmp_path, rows)
    parquet = tmp_path / "gsm.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    dataset = datasets.Dataset.from_list(rows)
    dataset.save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"test": dataset.select([0]), "train": dataset.select([1])}).save_to_disk(
        str(tmp_path / "saved_dict"))
    return [jsonl, parquet, tmp_path / "saved", tmp_path / "saved_dict"]


def test_jsonl_parquet_and_save_to_disk_benchmarks_load_alike(tmp_path):
    frame = trajectory_frame([*task(0, PLANTED), *task(1, "Fix it.", instance_id="gsm-8"), *task(2, "Fine.")])
    for path in saved_forms(tmp_path):
        benchmarks = index(tmp_path, {"name": "gsm8k", "path": str(path), "text_fields": ["question"],
                                      "id_field": "instance_id"})
        (summary,) = benchmarks.counted()
        assert (summary.items, summary.ids) == (2, 2) and summary.ngrams > 0 and len(summary.sha256) == 64, path
        for family, (written, excluded) in exported(frame, benchmarks).items():
            assert written == ids_of(frame, 2) and excluded == {"contaminated:gsm8k": 4}, (path, family)


def test_without_the_datasets_package_a_saved_folder_says_what_to_do(tmp_path, monkeypatch):
    import builtins

    (tmp_path / "saved").mkdir()
    real_import = builtins.__import__

    def no_datasets(name, *args, **kwargs):
        if name == "datasets":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    with pytest.raises(BenchmarkError, match="needs the `datasets` package"):
        index(tmp_path, {"name": "saved", "path": str(tmp_path / "saved"), "text_fields": ["question"]})


@pytest.mark.parametrize("setup, message", [
    (lambda p: {"path": str(p / "missing.jsonl")}, "missing.jsonl does not exist"),
    (lambda p: {"path": str(benchmark_file(p)), "text_fields": ["prompt"]}, "has no field prompt (its fields: "
                                                                             "instance_id, question)"),
    (lambda p: {"path": str(benchmark_file(p, [[{"question": QUESTION}]], name="array.json"))},
     "array.json line 1 is a JSON list, not an object"),  # a json.dump of a list: it would compare nothing
    (lambda p: {"path": str(broken_file(p))}, "bad.jsonl line 1 is not JSON"),
])
def test_an_unreadable_benchmark_is_named(tmp_path, setup, message):
    spec = {"name": "gsm8k", "text_fields": ["question"], **setup(tmp_path)}
    with pytest.raises(BenchmarkError, match=re.escape(f"decontamination benchmark 'gsm8k': ")) as error:
        index(tmp_path, spec)
    assert message in str(error.value)


@pytest.mark.parametrize("text, message", [
    ("decontamination:\n  benchmarks:\n  - {name: 'gsm 8k', path: g.jsonl, text_fields: [q]}\n",
     "decontamination.benchmarks.0.name: Value error, benchmark name 'gsm 8k' must be letters"),
    ("decontamination:\n  benchmarks:\n  - {name: gsm8k, path: g.jsonl}\n",
     "benchmark 'gsm8k' names neither text_fields nor id_field"),
    ("decontamination:\n  benchmarks:\n  - {name: g, path: g.jsonl, text_fields: [q]}\n"
     "  - {name: g, path: h.jsonl, text_fields: [q]}\n", "benchmark names must be unique: g appear"),
    ("decontamination:\n  benchmarks:\n  - {name: g, text_fields: [q]}\n", "decontamination.benchmarks.0.path: Field required"),
    ("decontamination:\n  benchmarks:\n  - {name: g, path: g.jsonl, task_id_field: task.id, text_fields: [q]}\n",
     "task_id_field needs id_field"),
    ("decontamination:\n  ngram: 0\n", "decontamination.ngram"),
    ("decontamination:\n  benchmarks:\n  - {name: g, path: g.jsonl, text_field: [q]}\n",
     "decontamination.benchmarks.0.text_field: Extra inputs are not permitted"),
])
def test_config_errors_are_readable(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)


def test_no_benchmark_means_no_index():
    assert build_index(DecontaminationConfig()) is None and PipelineConfig().decontamination.benchmarks == []


class CountingTable(FrameTable):
    """A FrameTable that records which columns each scan read."""

    def __init__(self, frame):
        super().__init__(frame)
        self.scans = []

    def scan(self, columns, ids=None):
        self.scans.append(list(columns))
        return super().scan(columns, ids)


def write_all(tmp_path, folder, frame, config):
    """Every export of every family written to ``folder``: {export: manifest}."""
    store = Storage(str(tmp_path / folder))
    table = CountingTable(frame)
    manifests = {}
    for family in FAMILIES:
        exports = family_exports(family)
        for outcome in write_exports(store, table, {}, config, exports, {export.name: "test" for export in exports},
                                     {}, build_index(config.decontamination)):
            assert isinstance(outcome, Written), outcome
            manifests[outcome.export.name] = outcome.manifest
    return manifests, table.scans


def test_manifests_name_the_benchmark_and_zero_matches_change_no_byte(tmp_path):
    frame = trajectory_frame([*task(0, PLANTED, ("A one", "B one")), *task(1, "Fine.", ("A two", "B two")),
                              *task(2, "Fine again.", ("A three", "B three"))])
    plain = PipelineConfig.model_validate({"sft": {"min_reward": None}, "grpo": {"default_agent_ref": "agent"}})
    benchmark = {"name": "gsm8k", "path": str(benchmark_file(tmp_path)), "text_fields": ["question"],
                 "id_field": "instance_id"}
    configured = plain.model_copy(update={"decontamination": DecontaminationConfig.model_validate(
        {"benchmarks": [benchmark]})})
    unrelated = plain.model_copy(update={"decontamination": DecontaminationConfig.model_validate(
        {"benchmarks": [{**benchmark, "path": str(benchmark_file(tmp_path, [{"question": "x " * 20, "instance_id": "none"}],
                                                       "u.jsonl")),
                         "name": "unrelated"}]})})

    before, plain_scans = write_all(tmp_path, "plain", frame, plain)
    after, configured_scans = write_all(tmp_path, "configured", frame, configured)
    untouched, _ = write_all(tmp_path, "unrelated", frame, unrelated)

    # no benchmark: the messages are never read for it, and the manifest has no block
    decontamination_scan = ["trajectory_id", "messages", "task_inputs", "metadata", "request"]
    assert decontamination_scan not in plain_scans
    assert configured_scans.count(decontamination_scan) == 3  # once per family
    assert all("decontamination" not in manifest for manifest in before.values())
    for name, manifest in after.items():
        assert manifest["excluded"]["contaminated:gsm8k"] == 2, name
        (block,) = manifest["decontamination"]["benchmarks"]
        assert manifest["decontamination"]["ngram"] == 13
        assert block["name"] == "gsm8k" and block["left_out"] == 2 and block["items"] == 2, name
        rows_before = sum(before[name]["rows"].values())  # (on_policy_tokens: none without token data)
        assert sum(manifest["rows"].values()) < rows_before or rows_before == 0, name
    # a benchmark that matches nothing: the same files, byte for byte
    for name, manifest in untouched.items():
        assert manifest["files"] == before[name]["files"], name
        assert manifest["decontamination"]["benchmarks"][0]["left_out"] == 0
    card = (tmp_path / "configured" / "exports" / "sft" / "README.md").read_text()
    assert "contaminated:gsm8k" in card and "Decontaminated: a trajectory sharing a 13-word n-gram" in card
    assert "Decontaminated" not in (tmp_path / "plain" / "exports" / "sft" / "README.md").read_text()


def test_ascii_and_unicode_texts_side_by_side_are_each_matched(tmp_path):
    """The fast path (ASCII) and the Unicode path are merged back in order, texts never joined."""
    benchmarks = index(tmp_path)
    texts = ["plain ascii text with nothing in it", PLANTED, "Ünïcödé — “quoted” text, nothing here",
             "NATÁLIA SOLD CLIPS TO 48 OF HER FRIENDS IN APRIL\u00a0AND THEN SHE SOLD", "",
             "natalia sold clips to 48 of her friends in april and then", "she sold half as many clips"]
    assert benchmarks.text_matches(pa.array(texts)).tolist() == [-1, 0, -1, 0, -1, -1, -1]
    # datatrove's punctuation set has ’ but not ‘: the reference keeps it, and so does this
    assert words("a\u3000b\u2014c\u00a0d ‘e’") == ["a", "b", "c", "d", "‘e"]


def test_an_export_step_fails_once_with_the_benchmarks_sentence(tmp_path):
    """The Dagster step reads the benchmarks itself (the UI has no CLI check before it): an
    unreadable one fails the step with the same sentence, never retried."""
    import dagster as dg

    from trajectory_assets.defs.exports import _benchmarks

    config = PipelineConfig.model_validate({"decontamination": {"benchmarks": [
        {"name": "gsm8k", "path": str(tmp_path / "gone.jsonl"), "text_fields": ["question"]}]}})
    with pytest.raises(dg.Failure) as failure:
        _benchmarks(config)
    assert "gone.jsonl does not exist" in failure.value.description and not failure.value.allow_retries
    assert _benchmarks(PipelineConfig()) is None


def test_numbers_normalise_alike_in_ascii_text_and_in_text_with_other_characters():
    # datatrove: one separator per number, so 1,000,000 is "0 0"; an em dash must not change it
    plain = "Natalia sold 1,000,000 clips in v1.2.3"
    assert words(plain + " \u2014") == words(plain) == ["natalia", "sold", "0", "0", "clips", "in", "v0", "0"]


def _by_arrow_alone(texts: list[str]) -> list[list[str]]:
    """The words of each text as the rules were first written, in Arrow's string kernels
    alone (the code before the compiled pass, kept here as the reference): ASCII text by
    ASCII lowercase and an ASCII number regex, any other text by Unicode lowercase, the
    ``\\p{Nd}`` number regex, datatrove's punctuation beyond ASCII and the Unicode spaces to
    spaces, NFD without combining marks; then the ASCII punctuation to spaces, a split on
    ASCII whitespace."""
    from trajectory_assets.ingest.decontamination import _NUMBERS, _SEPARATORS, _UNICODE_SPACES

    array = pa.array(texts, pa.string())
    ascii_only = pc.string_is_ascii(array)
    text = pc.replace_substring_regex(pc.ascii_lower(array), r"[0-9]+(?:[.,][0-9]+)?", "0")
    if not pc.all(ascii_only).as_py():
        unicode = pc.invert(ascii_only)
        other = pc.replace_substring_regex(pc.utf8_lower(pc.filter(array, unicode)), _NUMBERS, "0")
        other = pc.replace_substring_regex(other, _UNICODE_SPACES, " ")
        other = pc.replace_substring_regex(pc.utf8_normalize(other, form="NFD"), r"\p{Mn}+", "")
        text = pc.replace_with_mask(text, unicode, other)
    spaces = {code: " " for code in range(128) if _SEPARATORS[code]}
    translated = pa.array([value.translate(spaces) for value in text.to_pylist()], pa.string())
    return [[word for word in words if word]
            for words in pc.ascii_split_whitespace(pc.ascii_trim_whitespace(translated)).to_pylist()]


def test_every_code_point_the_fast_pass_handles_comes_out_as_the_unicode_rules_make_it():
    """The compiled pass handles a text without Arrow's Unicode rules when each of its code
    points is a letter they leave alone, a break, or one they replace by the same letters
    wherever it stands: checked here for every such code point, alone, inside a word, between
    digits and after an uppercase letter, against the rules in Arrow's string kernels alone."""
    from trajectory_assets.ingest import ngram_kernel
    from trajectory_assets.ingest.decontamination import _NO_INDEX, Normalised, _buffers, code_points

    rules = code_points()
    classes = rules[2]
    handled = [code for code in range(0x80, len(classes)) if classes[code] != ngram_kernel.UNICODE]
    assert len(handled) > 50_000  # the Basic Multilingual Plane but for digits, Hangul syllables and the like
    texts = [f"{chr(code)} aB{chr(code)}c 1{chr(code)}2 3.{chr(code)}4 Z{chr(code)}" for code in handled]
    array = pa.array(texts, pa.string())

    def needed(array: pa.Array) -> list[bool]:
        return ngram_kernel.scan(*_buffers(array), np.ones(len(array), np.bool_), rules, True, _NO_INDEX)[5].tolist()

    assert not any(needed(array))
    assert normalise(array).words().to_pylist() == _by_arrow_alone(texts)
    # and a code point it leaves to the Unicode rules sends its whole text there, wherever it stands
    assert needed(pa.array(["plain", "١٢", "가", "x\U00010400", "a b c d 가"])) == [False, True, True, True, True]
    # such a text is left without words, and the half-read one leaks into no other text's
    marked = ngram_kernel.scan(*_buffers(pa.array(["ab가", "cd ef"])), np.ones(2, np.bool_), rules, True, _NO_INDEX)
    assert Normalised(*marked[:4]).words().to_pylist() == [[], ["cd", "ef"]]


_CHARACTERS = st.sampled_from([*"aZ09 .,-_'\t\n", "1,000", "2.5", "0.9", "7.", "Ab", "\u00e9", "\u00c9", "\u0394", "\u00a0", "\u2014", "\u2019",
                               "\u0301", "\ufe0f", "\u0661", "\u066b", "\uac00", "\u4e2d", "\U0001f600", "\u2260",
                               "\u212a", "\u0130", "\U00010400"])


@settings(max_examples=300, deadline=None)
@example(texts=["1,000,000 3.4\u0301 \u00c9t\u00c9 \U0001f600x 1\u22602", "\u0661,\u0662 \u00c9"])
@given(texts=st.lists(st.lists(_CHARACTERS, max_size=30).map("".join), min_size=1, max_size=6))
def test_the_fast_pass_normalises_any_text_as_the_unicode_rules_do(texts):
    """ASCII, letters it maps, marks, digits of other scripts, breaks: in any order, in any
    texts side by side, each text's words are those of the rules in Arrow's string kernels
    alone (the texts holding a digit of another script, a Hangul syllable or a letter beyond
    the table go through Arrow's Unicode rules in both: for them this checks the rest)."""
    assert normalise(pa.array(texts, pa.string())).words().to_pylist() == _by_arrow_alone(texts)


# a vocabulary of ten words, so that random texts share long runs with random benchmark texts:
# one the pass maps (`café`), one only the Unicode rules handle (a Hangul syllable: its texts
# are scanned again once the rules ran)
_WORD = st.sampled_from(["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "Caf\u00e9", "\uac00", "theta"])
_TEXT = st.lists(_WORD, min_size=0, max_size=40).map(" ".join)


def _reference_owner(text: str, benchmarks: list[list[str]], n: int) -> int:
    """The first benchmark one of whose n-grams (or whole short text of MIN_WORDS..n-1 words)
    the text holds, by plain Python windows."""
    found = words(text)
    for number, texts in enumerate(benchmarks):
        for benchmark_text in texts:
            item = words(benchmark_text)
            grams = ({tuple(item[i:i + n]) for i in range(len(item) - n + 1)} if len(item) >= n
                     else {tuple(item)} if len(item) >= MIN_WORDS else set())
            if any(tuple(found[i:i + len(gram)]) in grams for gram in grams for i in range(len(found) - len(gram) + 1)):
                return number
    return -1


_THIRTEEN = "alpha beta gamma delta eps zeta eta theta alpha gamma beta delta eps"


@settings(max_examples=150, deadline=None)
# a window as long as its text, while a short benchmark text adds a second window length
@example(benchmarks=[[_THIRTEEN, "eta eta eta eta eta eta eta eta"]], texts=[_THIRTEEN], n=13)
@given(benchmarks=st.lists(st.lists(_TEXT, max_size=4), min_size=1, max_size=3), texts=st.lists(_TEXT, max_size=8),
       n=st.sampled_from([1, 2, 5, 9, 13]))
def test_text_matches_are_every_window_a_plain_search_finds(benchmarks, texts, n):
    """The word-pair filter and the window hashes skip no window a plain search matches, and
    invent none: across window lengths, texts at array boundaries, empty texts and words no
    benchmark uses."""
    summaries = [BenchmarkSummary(f"b{number}", "-", "-", len(b), None, 0) for number, b in enumerate(benchmarks)]
    index_ = BenchmarkIndex(n, summaries, [pa.array(b, pa.string()) for b in benchmarks])
    texts = [*texts, "omega " + (texts[0] if texts else "")]  # a word no benchmark uses
    assert index_.text_matches(pa.array(texts, pa.string())).tolist() == [
        _reference_owner(text, benchmarks, n) for text in texts]


def test_the_flags_fingerprint_follows_the_rules_source(tmp_path, monkeypatch):
    """Stored flags are recomputed after any edit of the rules' module (ingest's code version
    does not follow it: tests/test_code_versions.py)."""
    from trajectory_assets.ingest import decontamination

    assert [path.name for path in decontamination.RULES_FILES] == ["decontamination.py", "ngram_kernel.py"]
    assert decontamination.RULES_SHA256 == hashlib.sha256(
        Path(decontamination.__file__).read_bytes()
        + Path(decontamination.__file__).with_name("ngram_kernel.py").read_bytes()).hexdigest()
    before = index(tmp_path).fingerprint
    monkeypatch.setattr(decontamination, "RULES_SHA256", "edited")
    assert index(tmp_path).fingerprint != before


def test_a_trajectory_matching_two_benchmarks_is_named_by_the_first_at_ingest_and_by_a_scan(tmp_path):
    """Its id names the second benchmark, its text the first: the first names it, whichever test
    ran first (ingest once stopped at the id)."""
    from trajectory_assets.ingest.decontamination import IngestFlags
    from trajectory_assets.jsonutil import dumps
    from trajectory_assets.sources import convert_record

    first = {"name": "first", "path": str(benchmark_file(tmp_path, name="a.jsonl")), "text_fields": ["question"]}
    second = {"name": "second", "path": str(benchmark_file(tmp_path, name="b.jsonl")), "text_fields": ["question"],
              "id_field": "instance_id"}
    benchmarks = index(tmp_path, first, second)
    rollout = make_rollout(request_input=PLANTED, _ng_task_index=0, instance_id="gsm-8")
    flags = IngestFlags(benchmarks)
    flags.add("t-1", convert_record(dumps(rollout), source_id="src.jsonl"))
    assert flags.result()["contaminated"] == {"t-1": "first"}
    out = build("sft", trajectory_frame([rollout]), SftConfig(), ALL_TRAIN, benchmarks=benchmarks)
    assert out.excluded == {"contaminated:first": 1}


def test_the_pass_compiles_in_memory_where_numba_can_write_no_cache():
    """A read-only install without a home (numba finds no cache folder and raises as a cached
    function is defined): each process compiles the pass again, says so, and it runs."""
    import subprocess
    import sys

    probe = ("import warnings; warnings.simplefilter('error')\n"
             "from numba.core import caching\n"
             "caching.CacheImpl._locator_classes = []  # no folder numba can write to\n"
             "from numba import njit\n"
             "try:\n    njit(cache=True)(lambda value: value)\nexcept RuntimeError as error:\n"
             "    assert 'no locator available' in str(error)\n"
             "else:\n    raise AssertionError('numba cached without a folder')\n"
             "warnings.simplefilter('ignore')\n"
             "from trajectory_assets.ingest import ngram_kernel\n"
             "from trajectory_assets.ingest.decontamination import words\n"
             "print(words('Café 1,000'), type(ngram_kernel.scan._cache).__name__)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['cafe',", "'0']", "NullCache"]
    warned = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", probe.replace(
        "warnings.simplefilter('ignore')\n", "")], capture_output=True, text=True)
    assert "numba can write no cache for" in warned.stderr


def test_a_text_of_no_word_matches_nothing_even_with_one_word_ngrams():
    """Punctuation alone (a tool call's `{}`) normalises to no word. The Arrow code before the
    compiled pass split it into one empty word, which with `ngram: 1` matched a benchmark's
    empty text: every tool call without arguments was taken for contaminated."""
    index_ = BenchmarkIndex(1, [BenchmarkSummary("b", "-", "-", 2, None, 0)], [pa.array(["", "alpha"])])
    assert index_.text_matches(pa.array(["", "{}", "x", "Alpha!"])).tolist() == [-1, -1, -1, 0]
    assert index_.counted()[0].ngrams == 1


def test_a_match_before_a_code_point_only_the_unicode_rules_handle_is_checked_by_them():
    """The pass matches no further in a text once it holds a window of the first benchmark, yet
    the rest of it may hold a code point that sends the whole text through the Unicode rules,
    which can change the words already read: datatrove's number rule takes `5,٣` (an
    Arabic-Indic three) as one number, so `5,٣abc` is the word `0abc`, not `0` then more."""
    words_ = "alpha beta gamma delta eps zeta eta theta iota kappa lambda mu"
    index_ = BenchmarkIndex(13, [BenchmarkSummary("b", "-", "-", 1, None, 0)], [pa.array([f"{words_} 5"])])
    texts = [f"{words_} 5, then", f"{words_} 5,\u0663abc", f"{words_} 7 and \uac00 later", f"{words_} \u0663"]
    hangul = "\u1100\u1161"  # the syllable, decomposed (NFD)
    assert [words(text)[-2:] for text in texts] == [["0", "then"], ["mu", "0abc"], [hangul, "later"], ["mu", "0"]]
    assert index_.text_matches(pa.array(texts)).tolist() == [0, -1, 0, 0]


@pytest.mark.parametrize("filler", [9_000, 20_000])
def test_long_texts_are_matched_to_their_end_alone_and_after_shorter_ones(filler):
    """Without ``emit`` the pass keeps a text's word hashes in a scratch array sized for the
    longest text of the call, each text from its start. A window in the last words of a long
    text, and one in the middle of a longer one, are found, whether the text comes alone or
    after others."""
    words_ = "alpha beta gamma delta eps zeta eta theta iota kappa lambda mu nu"
    index_ = BenchmarkIndex(13, [BenchmarkSummary("b", "-", "-", 1, None, 0)], [pa.array([words_])])
    at_the_end = " ".join(["w"] * filler) + " " + words_
    in_the_middle = " ".join(["w"] * 4090) + " " + words_ + " " + " ".join(["w"] * filler)
    texts = [at_the_end, in_the_middle, " ".join(["w"] * filler), "short " + words_]
    assert index_.text_matches(pa.array(texts)).tolist() == [0, 0, -1, 0]
    assert [index_.text_matches(pa.array([text])).tolist() for text in texts] == [[0], [0], [-1], [0]]
    assert len(normalise(pa.array([at_the_end])).words()[0]) == filler + 13
