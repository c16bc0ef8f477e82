"""Our exports, as the CLI writes them, load in `datasets` and train in TRL with no user-side fixing.

Nothing is downloaded: the tokenizer is trained here on the exported text and the model is a
tiny randomly initialised Llama. The dataset rows are passed to the trainers exactly as loaded
(`load_dataset("<export folder>")`, argument objects through the Json feature).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

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


# --- loading ---------------------------------------------------------------------------------


def load_train(folder: Path, cache_dir: str) -> datasets.Dataset:
    """The train split as a user loads it: `load_dataset("<export folder>")`, nothing else."""
    return datasets.load_dataset(str(folder), cache_dir=cache_dir)["train"]


# --- a tokenizer and a model built in the test ------------------------------------------------

SPECIAL_TOKENS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
                  "<tool_call>", "</tool_call>", "<tools>", "</tools>"]

# ChatML with tools, reasoning, tool results and tool calls, arguments through `tojson` as
# Qwen2.5's and Llama 3.1's templates write them (test_chat_rendering.py checks what that makes
# of every row). Keys a message does not use come back from Arrow as None and transformers drops
# them before rendering, so the tests are on truthiness.
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
{{- '\n<tool_call>' + call.function.name + ' ' }}{{ call.function.arguments | tojson }}{{ '</tool_call>' }}
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
        use_cpu=True, max_length=2048,  # the corpus pair's prompt alone is ~600 words
        save_strategy="no", logging_steps=1, dataloader_num_workers=0,
    )


def assert_trained(trainer) -> None:
    assert trainer.state.global_step == 2
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses, trainer.state.log_history
    assert all(math.isfinite(loss) for loss in losses), losses


def train_sft(folder: Path, cache_dir: str, output_dir: Path):
    dataset = load_train(folder, cache_dir)
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
    dataset = load_train(folder, cache_dir)
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


# --- the exports of real runs (the bundled sample, and ../shared/corpus when present) -----------


def test_sft_trainer_trains_on_the_trl_sft_export(run_exports, hf_cache, tmp_path):
    assert_trained(train_sft(run_exports / "trl_sft", hf_cache, tmp_path))


def test_dpo_trainer_trains_on_the_trl_dpo_export(run_exports, hf_cache, tmp_path):
    assert_trained(train_dpo(run_exports / "trl_dpo", hf_cache, tmp_path))


def test_sft_trainer_trains_on_a_sharded_trl_sft_export(sharded_exports, tmp_path):
    """Its train split is three files (test_sharded_exports.py checks the rows and their order).
    A cache of its own: datasets would answer for the unsharded folder's identical card."""
    assert len(list((sharded_exports / "trl_sft").glob("train-*.parquet"))) == 3
    trainer = train_sft(sharded_exports / "trl_sft", str(tmp_path / "cache"), tmp_path / "out")
    assert_trained(trainer)
    assert len(trainer.train_dataset) == json.loads((sharded_exports / "trl_sft" / "manifest.json").read_text())[
        "rows"]["train"]
