"""Our exports, as the CLI writes them, load in `datasets` and train in TRL with no user-side fixing.

Nothing is downloaded: the tokenizer is trained here on the exported text and the model is a
tiny randomly initialised Llama. The dataset rows are passed to the trainers exactly as loaded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SAMPLE
from tests.trainers.conftest import trainer_libs_missing

pytestmark = [
    pytest.mark.trainers,
    pytest.mark.filterwarnings("ignore::FutureWarning"),  # transformers' renames, raised inside TRL
]

MISSING = trainer_libs_missing()  # skips the module outside CI when the libraries are absent

if not MISSING:
    import datasets
    import torch
    import trl
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import trainers as tokenizer_trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    datasets.disable_progress_bars()


@pytest.fixture(autouse=True, scope="module")
def trainer_libs():
    if MISSING:  # only reached with CI set: fail every test rather than skip
        pytest.fail(f"CI is set but the trainers test group cannot run: {MISSING}")


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Path:
    """`trajectory-assets run` on the sample rollouts; the exports folder it writes."""
    from trajectory_assets.cli import main

    storage = tmp_path_factory.mktemp("out")
    assert main(["run", "--source", str(SAMPLE), "--storage", str(storage)]) == 0  # DAGSTER_HOME: conftest's
    return storage / "exports"


@pytest.fixture(scope="module")
def hf_cache(tmp_path_factory) -> str:
    """datasets' cache (the loaded Arrow files and TRL's tokenized maps) kept out of ~/.cache."""
    return str(tmp_path_factory.mktemp("hf_cache"))


# --- loading ---------------------------------------------------------------------------------


def load(files: list[Path], cache_dir: str) -> datasets.Dataset:
    """All given files of one format as one dataset, as a user would: `load_dataset("json"|"parquet")`."""
    builder = "parquet" if files[0].suffix == ".parquet" else "json"
    return datasets.load_dataset(builder, data_files=[str(f) for f in files], split="train", cache_dir=cache_dir)


def file_rows(path: Path) -> int:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    return sum(1 for line in path.read_bytes().splitlines() if line.strip())


def json_fallbacks(feature: Any, path: str = "") -> list[str]:
    """Paths of every `datasets.Json` feature: where Arrow found no single type for a field."""
    if isinstance(feature, datasets.Json):
        return [path or "<root>"]
    if isinstance(feature, dict):
        return [p for key, sub in feature.items() for p in json_fallbacks(sub, f"{path}.{key}" if path else key)]
    if isinstance(feature, (list, tuple)):
        return [p for sub in feature for p in json_fallbacks(sub, f"{path}[]")]
    if hasattr(feature, "feature"):  # List, LargeList, Sequence
        return json_fallbacks(feature.feature, f"{path}[]")
    return []


def check_loads(folder: Path, cache_dir: str, *, concrete: bool) -> list[str]:
    """Problems loading one export folder (every split at once); empty when it loads cleanly."""
    problems = []
    for suffix in (".jsonl", ".parquet"):
        files = sorted(folder.glob(f"*{suffix}"))
        if not files:
            continue
        try:
            dataset = load(files, cache_dir)
        except Exception as error:  # noqa: BLE001 - reported with the folder, all folders at once
            cause = error.__cause__ or error
            problems.append(f"{folder.name}/*{suffix}: {type(cause).__name__}: {cause}".splitlines()[0])
            continue
        expected = sum(file_rows(f) for f in files)
        if len(dataset) != expected:
            problems.append(f"{folder.name}/*{suffix}: {len(dataset)} rows loaded, {expected} in the files")
        if concrete and (fallbacks := json_fallbacks(dataset.features)):
            problems.append(f"{folder.name}/*{suffix}: no single Arrow type for {fallbacks}")
    return problems


# --- a tokenizer and a model built in the test ------------------------------------------------

SPECIAL_TOKENS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
                  "<tool_call>", "</tool_call>", "<tools>", "</tools>"]

# ChatML with tools, reasoning, tool results and tool calls. `+` on the arguments requires the
# JSON string of OpenAI's format (a dict would raise). Keys a message does not use come back
# from Arrow as None, so the tests are on truthiness.
CHAT_TEMPLATE = r"""
{%- if tools %}{{ '<|im_start|>system\n<tools>\n' }}
{%- for tool in tools %}{{ tool | tojson }}{{ '\n' }}{% endfor %}
{{- '</tools><|im_end|>\n' }}{% endif %}
{%- for message in messages %}
{{- '<|im_start|>' + message.role }}
{%- if message.tool_call_id %}{{ ' ' + message.tool_call_id }}{% endif %}
{{- '\n' }}
{%- if message.reasoning_content %}{{ '<think>' + message.reasoning_content + '</think>\n' }}{% endif %}
{{- message.content }}
{%- for call in message.tool_calls or [] %}
{{- '\n<tool_call>' + call.function.name + ' ' + call.function.arguments + '</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
""".strip()


def build_tokenizer(dataset: datasets.Dataset) -> PreTrainedTokenizerFast:
    """A word-level tokenizer trained on the exported rows' text, with the chat template above."""
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece()  # joins words with spaces, for TRL's warnings
    texts = [CHAT_TEMPLATE] + [json.dumps(row) for row in dataset]
    tokenizer.train_from_iterator(texts, tokenizer_trainers.WordLevelTrainer(special_tokens=SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_model(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )
    return LlamaForCausalLM(config)


def run_args(output_dir: Path) -> dict[str, Any]:
    return dict(
        output_dir=str(output_dir), max_steps=2, per_device_train_batch_size=2, report_to="none",
        use_cpu=True, max_length=512, save_strategy="no", logging_steps=1, dataloader_num_workers=0,
    )


def assert_trained(trainer) -> None:
    assert trainer.state.global_step == 2
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses, trainer.state.log_history
    assert all(math.isfinite(loss) for loss in losses), losses


def split_files(folder: Path, split: str) -> list[Path]:
    return sorted(folder.glob(f"{split}.*"))  # train.jsonl or train.parquet


def train_sft(folder: Path, cache_dir: str, output_dir: Path):
    dataset = load(split_files(folder, "train"), cache_dir)
    tokenizer = build_tokenizer(dataset)
    trainer = trl.SFTTrainer(
        model=tiny_model(tokenizer),
        args=trl.SFTConfig(**run_args(output_dir)),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer


def train_dpo(folder: Path, cache_dir: str, output_dir: Path):
    dataset = load(split_files(folder, "train"), cache_dir)
    tokenizer = build_tokenizer(dataset)
    trainer = trl.DPOTrainer(
        model=tiny_model(tokenizer),
        ref_model=tiny_model(tokenizer),  # TRL would load it by name: an in-memory model has none
        args=trl.DPOConfig(**run_args(output_dir)),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer


# --- the exports the CLI writes ---------------------------------------------------------------


def test_every_export_loads_with_datasets(exports, hf_cache):
    folders = sorted(p for p in exports.iterdir() if p.is_dir())
    assert {"trl_sft", "trl_dpo"} <= {f.name for f in folders}, [f.name for f in folders]
    problems = [p for f in folders for p in check_loads(f, hf_cache, concrete=f.name.startswith("trl_"))]
    assert not problems, "\n".join(problems)


def test_sft_trainer_trains_on_the_trl_sft_export(exports, hf_cache, tmp_path):
    assert_trained(train_sft(exports / "trl_sft", hf_cache, tmp_path))


def test_dpo_trainer_trains_on_the_trl_dpo_export(exports, hf_cache, tmp_path):
    assert_trained(train_dpo(exports / "trl_dpo", hf_cache, tmp_path))
