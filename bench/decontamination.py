"""What benchmark decontamination costs, against ingest, measured in one process and one run.

    python -m bench.decontamination --size 1000 --items 10000

Builds a corpus of ``--size`` MB (bench/corpus.py, as ``bench.run`` does) and an evaluation
set of ``--items`` items: questions of 40-160 words drawn from the words the corpus's own
turns use (so nearly every window of a trajectory is made of benchmark words and gets
hashed: the slow case), plus the user prompts of a few of the corpus's template rollouts (so
real matches are found) and, as ids, SWE-bench ``instance_id`` s its rollouts carry. Beside
that worst case, a realistic one: an evaluation set as large, of made-up words the corpus does
not use (``unrelated_set``), as most evaluation sets are unrelated to the rollouts trained on.
Then, one batch after the other (``ingest/batch.py``'s ``ingest_batch`` with the default
redaction, as each ingest step does):

- **ingest** without decontamination, then **ingest with it** (``IngestFlags`` fed each
  trajectory as it is converted, its flags written beside the batch): the time spent in
  decontamination is timed inside (the index, built once per process, included), and the
  difference of the two ingests is shown too; then ingest with the unrelated set, timed the
  same way;
- **the family steps**: each family's plan with and without the index, the flags stored at
  ingest being current: what decontamination adds to a datasets run;
- **a batch without flags**: every stored trajectory checked by reading it again
  (``decontamination.contaminated``), what an export step does for a batch ingested before
  the benchmarks were configured or changed (once: it then stores the flags).
- **the compiled pass alone**: every distinct text ingest compares, in one Arrow array,
  matched against the tables (best of three): the part of the texts' cost outside Python.

Each ingest runs in a fresh process (as an ingest step does: numba's import, the table of
code points and loading the compiled pass are paid in it), and so does **the set-up alone**:
reading the benchmarks, building the n-gram tables and loading the pass, what every process
that checks texts pays once, whatever its data. Each is divided by the ingest time. Ingest
here is one process on one core; ``trajectory-assets run`` ingests in one process per core,
so its wall time is shorter, its CPU time the same.
Writes bench/out/decontamination.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import multiprocessing
import random
import shutil
import tempfile
import time
from pathlib import Path

import orjson

from bench.corpus import build_corpus, seed_rows

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus" / "nemo_gym"
OUT = ROOT / "bench" / "out"
clock = time.perf_counter


def ingest_all(source: Path, storage: Path, benchmark_sets=()) -> tuple[float, float, int]:
    """Every file of ``source`` ingested into ``storage`` as the ingest steps do
    (``batch.ingest_batch``, its source record written first: that is the raw asset's work),
    with the flags of each of ``benchmark_sets`` (``decontamination`` sections): (seconds, of
    which in decontamination, rows)."""
    from trajectory_assets.config import PipelineConfig
    from trajectory_assets.ingest.batch import ingest_batch, write_source_record
    from trajectory_assets.ingest.decontamination import ingest_flags
    from trajectory_assets.io.source_files import SourceFile, batch_key
    from trajectory_assets.io.storage import Storage
    from trajectory_assets import layout

    config = PipelineConfig()
    store = Storage(str(storage))
    keys = []
    for path in sorted(source.glob("*.jsonl")):
        keys.append(batch_key(path.name))
        write_source_record(keys[-1], store, SourceFile(str(path), path.name))
    rows = 0
    inside = 0.0
    start = clock()
    for key in keys:
        began = clock()
        flags = [TimedFlags(recorder) for recorder in ingest_flags(benchmark_sets)]
        inside += clock() - began
        ingest_batch(key, store, config, flags=flags)
        inside += sum(recorder.seconds for recorder in flags)
        rows += store.read_json(layout.batch_summary(key))["records_valid"]
    return clock() - start, inside, rows


class TimedFlags:
    """Decontamination's recorder (``IngestFlags``), timed: the seconds spent in it."""

    def __init__(self, flags) -> None:
        self.flags = flags
        self.fingerprint = flags.fingerprint
        self.seconds = 0.0

    def add(self, trajectory_id, trajectory) -> None:
        began = clock()
        self.flags.add(trajectory_id, trajectory)
        self.seconds += clock() - began

    def result(self) -> dict:
        began = clock()
        result = self.flags.result()
        self.seconds += clock() - began
        return result


def setup_alone(decontamination) -> dict[str, float]:
    """Seconds a process spends before its first text is checked, by part: the benchmarks
    read, numba imported with the table of code points, SciPy's ``linalg`` (numba's first
    call imports it, to learn whether it can compile ``np.dot``: ``numba/np/arraymath.py``'s
    ``_check_blas``; timed alone here, so the next part does not count it), the compiled
    pass loaded (its first call, on one word: numba initialises its CPU target then), the
    n-gram tables built."""
    import pyarrow as pa

    import trajectory_assets.ingest.batch  # noqa: F401  (what ingest_all imports before its clock starts)
    from trajectory_assets.ingest import decontamination as module

    parts = {}
    start = clock()
    (flags,) = module.ingest_flags([decontamination])
    parts["benchmarks read"] = clock() - start
    for part, step in (("numba imported, code points", module.code_points),
                       ("SciPy's linalg, for numba", lambda: importlib.util.find_spec("scipy") is None
                        or importlib.import_module("scipy.linalg.cython_blas")),
                       ("pass loaded", lambda: module.normalise(pa.array(["x"]))),
                       ("n-gram tables", lambda: flags.index.tables)):
        began = clock()
        step()
        parts[part] = clock() - began
    return {part: round(seconds, 3) for part, seconds in parts.items()}


def in_fresh_process(function, *args):
    """``function(*args)`` in a new Python process (nothing imported or cached by this one)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)


def evaluation_set(path: Path, storage: Path, batches: list[str], items: int, seed: int = 11) -> dict:
    """Writes ``items`` benchmark rows {question, instance_id} as JSON lines; returns what it holds."""
    from trajectory_assets.ingest.decontamination import turn_texts, words
    from trajectory_assets.io.storage import Storage
    from trajectory_assets.io.trajectory_table import StoredTrajectories

    rng = random.Random(seed)
    vocabulary: set[str] = set()
    prompts: list[str] = []
    instance_ids: set[str] = set()
    table = StoredTrajectories(Storage(str(storage)), batches)
    for chunk in table.scan(["messages", "metadata"]):
        for messages, metadata in zip(chunk["messages"][:200], chunk["metadata"][:200]):
            texts = list(turn_texts(orjson.loads(messages)))
            for text in texts:
                vocabulary.update(words(text)[:2000])
            instance_id = orjson.loads(metadata).get("instance_id")
            if isinstance(instance_id, str):
                instance_ids.add(instance_id)
        if len(vocabulary) > 50_000:
            break
    # planted: the user prompts of a few template rollouts, without the bench's task marker
    templates = seed_rows(CORPUS)
    for row in templates[:: max(1, len(templates) // 5)][:5]:
        for item in row["responses_create_params"]["input"] if isinstance(row["responses_create_params"]["input"],
                                                                           list) else []:
            if isinstance(item, dict) and item.get("role") == "user" and isinstance(item.get("content"), str):
                prompts.append(item["content"])
                break
    words_list = sorted(vocabulary)
    rows = [{"question": prompt, "instance_id": f"planted-{n}"} for n, prompt in enumerate(prompts)]
    rows += [{"question": None, "instance_id": instance_id} for instance_id in sorted(instance_ids)[:3]]
    while len(rows) < items:
        rows.append({"question": " ".join(rng.choice(words_list) for _ in range(rng.randint(40, 160))),
                     "instance_id": f"synthetic-{len(rows)}"})
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return {"items": len(rows), "planted_prompts": len(prompts), "planted_ids": min(3, len(instance_ids)),
            "vocabulary": len(words_list), "bytes": path.stat().st_size}, vocabulary


def unrelated_set(path: Path, vocabulary: set[str], items: int, seed: int = 13) -> dict:
    """Writes ``items`` benchmark rows of made-up words (consonant-vowel syllables) the corpus's
    turns do not use, as long as ``evaluation_set``'s: an evaluation set unrelated to the corpus,
    as most are. Hardly any window of a trajectory is then made of benchmark words."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words_list: list[str] = []
    while len(words_list) < 20_000:
        word = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4)))
        if word not in vocabulary:
            words_list.append(word)
    rows = [{"question": " ".join(rng.choice(words_list) for _ in range(rng.randint(40, 160))),
             "instance_id": f"unrelated-{n}"} for n in range(items)]
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return {"items": len(rows), "vocabulary": len(set(words_list)), "bytes": path.stat().st_size}


def benchmark_config(benchmark: Path):
    from trajectory_assets.config import DecontaminationConfig

    return DecontaminationConfig.model_validate({"benchmarks": [
        {"name": "bench", "path": str(benchmark), "text_fields": ["question"], "id_field": "instance_id"}]})


def measure(storage: Path, benchmark: Path, batches: list[str]) -> dict:
    """The family steps with current flags, then one scan of every batch as if it had none."""
    from trajectory_assets.config import PipelineConfig
    import pyarrow as pa

    from trajectory_assets.ingest.decontamination import build_index, contaminated, scan_columns, turn_texts
    from trajectory_assets.exports.families import dpo, grpo, sft
    from trajectory_assets.io.storage import Storage
    from trajectory_assets.io.trajectory_table import StoredTrajectories

    table = StoredTrajectories(Storage(str(storage)), batches)
    start = clock()
    index = build_index(benchmark_config(benchmark))
    index_s = clock() - start
    pipeline = PipelineConfig()
    families = {}
    for name, module in (("sft", sft), ("dpo", dpo), ("grpo", grpo)):
        section = getattr(pipeline, name)
        start = clock()
        module.plan(table, section)
        without = clock() - start
        start = clock()
        excluded = module.plan(table, section, None, build_index(benchmark_config(benchmark))).excluded
        with_index = clock() - start  # the step reads and indexes the benchmarks itself
        families[name] = {"plan_s": round(without, 3), "plan_with_decontamination_s": round(with_index, 3),
                          "added_s": round(with_index - without, 3),
                          "left_out": excluded.get("contaminated:bench", 0)}
    start = clock()
    matched = contaminated(table.scan(scan_columns(index)), index)
    scan_s = clock() - start
    # the compiled pass alone (tables built, pass loaded by the scan above) over every distinct
    # text ingest compares, in one Arrow array: what the texts' part pays outside Python
    texts = pa.array(list(dict.fromkeys(text for chunk in table.scan(["messages"]) for messages in chunk["messages"]
                                        for text in turn_texts(orjson.loads(messages)))), pa.string())
    pass_s = min(_timed(index.text_matches, texts) for _ in range(3))
    return {"index_s": round(index_s, 3), "ngrams": index.counted()[0].ngrams, "families": families,
            "scan_without_flags_s": round(scan_s, 3), "matched_by_scan": len(matched),
            "pass_alone_s": round(pass_s, 3), "pass_alone_texts": len(texts), "pass_alone_bytes": texts.nbytes}


def _timed(function, *args) -> float:
    start = clock()
    function(*args)
    return clock() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=float, default=1000, help="corpus size in MB (default 1000)")
    parser.add_argument("--items", type=int, default=10_000, help="evaluation set items (default 10000)")
    parser.add_argument("--work", type=Path, default=None, help="working folder (default: a temporary one)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-decont-"))
    try:
        corpus = build_corpus(int(args.size * 1e6), work / "source", CORPUS, distinct_turns=True)
        plain_s, _, rows = in_fresh_process(ingest_all, work / "source", work / "plain")
        batches = sorted(path.name[: -len(".parquet")]
                         for path in (work / "plain" / "trajectories" / "batches").glob("*.parquet"))
        benchmark, vocabulary = evaluation_set(work / "benchmark.jsonl", work / "plain", batches, args.items)
        unrelated = unrelated_set(work / "unrelated.jsonl", vocabulary, args.items)
        shutil.rmtree(work / "plain")
        unrelated_s, unrelated_inside_s, _ = in_fresh_process(
            ingest_all, work / "source", work / "unrelated", [benchmark_config(work / "unrelated.jsonl")])
        unrelated_setup_s = sum(in_fresh_process(setup_alone, benchmark_config(work / "unrelated.jsonl")).values())
        shutil.rmtree(work / "unrelated")
        config = benchmark_config(work / "benchmark.jsonl")
        with_s, inside_s, _ = in_fresh_process(ingest_all, work / "source", work / "storage", [config])
        setup = in_fresh_process(setup_alone, config)
        setup_s = sum(setup.values())
        measured = in_fresh_process(measure, work / "storage", work / "benchmark.jsonl", batches)
        flagged = sum(len(orjson.loads(path.read_bytes())["contaminated"])  # (one benchmark set: a file a batch)
                      for path in (work / "storage" / "trajectories" / "batches").glob("*.decontamination/*.json"))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    families_s = sum(family["added_s"] for family in measured["families"].values())
    result = {
        "corpus": {**corpus, "trajectories": rows}, "benchmark": benchmark,
        "ingest_s": round(plain_s, 3), "ingest_with_decontamination_s": round(with_s, 3),
        "in_decontamination_s": round(inside_s, 3), "setup_s": round(setup_s, 3), "setup_parts_s": setup,
        "matched_at_ingest": flagged,
        **measured,
        "ratio_at_ingest": round(inside_s / plain_s, 4),
        "unrelated": {**unrelated, "ingest_with_decontamination_s": round(unrelated_s, 3),
                      "in_decontamination_s": round(unrelated_inside_s, 3),
                      "setup_s": round(unrelated_setup_s, 3),
                      "ratio_at_ingest": round(unrelated_inside_s / plain_s, 4),
                      "ratio_texts": round((unrelated_inside_s - unrelated_setup_s) / plain_s, 4)},
        "ratio_setup": round(setup_s / plain_s, 4),
        "ratio_texts": round((inside_s - setup_s) / plain_s, 4),
        "ratio_families": round(families_s / plain_s, 4),
        "ratio_run": round((inside_s + families_s) / plain_s, 4),
        "ratio_scan_without_flags": round(measured["scan_without_flags_s"] / plain_s, 4),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "decontamination.json").write_text(json.dumps(result, indent=2) + "\n")
    mb = corpus["bytes"] / 1e6
    print(f"corpus {mb:.0f} MB, {rows} trajectories, {corpus['files']} files; evaluation set {benchmark['items']} "
          f"items ({measured['ngrams']} n-grams); matched at ingest {flagged}, by a scan {measured['matched_by_scan']}\n")
    print("| what | seconds | / ingest |\n|---|---|---|")
    print(f"| ingest (one process, no benchmarks) | {plain_s:.2f} | 1 |")
    print(f"| ingest with the benchmarks ({with_s - plain_s:+.2f} s) | {with_s:.2f} | {with_s / plain_s:.3f} |")
    print(f"| of which in decontamination (timed inside: index, texts, flags) | {inside_s:.2f} | "
          f"{result['ratio_at_ingest']:.3f} |")
    print(f"| - the set-up, once per process (alone: {', '.join(f'{k} {v:.2f} s' for k, v in setup.items())}) | "
          f"{setup_s:.2f} | {result['ratio_setup']:.3f} |")
    print(f"| - the rest: the texts and ids checked, the flags written | {inside_s - setup_s:.2f} | "
          f"{result['ratio_texts']:.3f} |")
    print(f"| unrelated evaluation set ({unrelated['items']} items of words the corpus does not use): in "
          f"decontamination | {unrelated_inside_s:.2f} | {unrelated_inside_s / plain_s:.3f} |")
    print(f"| - the set-up, once per process (alone) | {unrelated_setup_s:.2f} | {unrelated_setup_s / plain_s:.3f} |")
    print(f"| - the rest: the texts and ids checked, the flags written | {unrelated_inside_s - unrelated_setup_s:.2f} | "
          f"{result['unrelated']['ratio_texts']:.3f} |")
    for name, family in measured["families"].items():
        print(f"| {name} plan: added, flags current ({family['plan_s']:.2f} -> "
              f"{family['plan_with_decontamination_s']:.2f} s; {family['left_out']} left out) | "
              f"{family['added_s']:.2f} | {family['added_s'] / plain_s:.3f} |")
    print(f"| a run: at ingest + the three family steps | {inside_s + families_s:.2f} | {result['ratio_run']:.3f} |")
    print(f"| without flags: every stored trajectory read and checked once | {measured['scan_without_flags_s']:.2f} | "
          f"{result['ratio_scan_without_flags']:.3f} |")
    print(f"| the compiled pass alone, best of three, over the {measured['pass_alone_texts']} distinct compared texts "
          f"({measured['pass_alone_bytes'] / 1e6:.0f} MB) | {measured['pass_alone_s']:.2f} | "
          f"{measured['pass_alone_s'] / plain_s:.3f} |")


if __name__ == "__main__":
    main()
