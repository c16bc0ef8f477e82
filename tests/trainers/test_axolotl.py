"""The axolotl export, tokenized by Axolotl's own ``chat_template`` strategy and trained.

Axolotl decides per message which tokens carry labels (``message_field_training``). For every
row the CLI wrote, under two rules (every assistant message; the final one only), the test
locates each message's characters in the rendered conversation by prefix rendering, and checks
that the labelled tokens are exactly tokens of the messages flagged ``train: true`` (each
flagged message has labelled tokens; no other message has any). A tiny model then takes two
optimizer steps on the labelled batches. Nothing is downloaded: the tokenizer is built here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.trainers.conftest import _cli_run, trainer_libs_missing
from tests.trainers.test_trl_training import CHAT_TEMPLATE

pytestmark = pytest.mark.trainers

MISSING = trainer_libs_missing()  # skips the module outside CI when the libraries are absent

if not MISSING:
    import datasets
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import trainers as tokenizer_trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    datasets.disable_progress_bars()

IGNORE = -100
SPECIAL_TOKENS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
                  "</tool_call>", "<tools>", "</tools>"]


@pytest.fixture(scope="module", params=["all_assistant", "final_assistant"])
def axolotl_rows(request, tmp_path_factory, hf_cache):
    """The axolotl export of a CLI run over the bundled sample under one rule, loaded as
    Axolotl's loader does (``datasets``, the folder's declared features)."""
    from tests.conftest import SAMPLE

    config = tmp_path_factory.mktemp("config") / "config.yaml"
    config.write_text(f"sft:\n  train_on: {request.param}\n")
    exports = _cli_run(tmp_path_factory, SAMPLE, "--config", str(config))
    rows = list(datasets.load_dataset(str(exports / "axolotl"), cache_dir=hf_cache)["train"])
    assert rows
    return request.param, rows


def byte_level_tokenizer(rows) -> "PreTrainedTokenizerFast":
    """A fast BPE tokenizer (Axolotl locates turns by character offsets) trained on the rows."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    texts = [CHAT_TEMPLATE] + [json.dumps(row, default=str) for row in rows]
    tokenizer.train_from_iterator(texts, tokenizer_trainers.BpeTrainer(
        vocab_size=600, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="<|im_end|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def axolotl_strategy(tokenizer):
    """Axolotl's own loader, with the dataset config the export's module documents."""
    from axolotl.prompt_strategies.chat_template import StrategyLoader
    from axolotl.utils.dict import DictDefault

    from trajectory_assets.exports.axolotl import DATASET_CONFIG

    cfg = DictDefault({"sequence_len": 8192, "train_on_inputs": False, "chat_template": "jinja",
                       "chat_template_jinja": CHAT_TEMPLATE})
    return StrategyLoader()(tokenizer, cfg, {**DATASET_CONFIG, "chat_template": "jinja",
                                             "chat_template_jinja": CHAT_TEMPLATE})


def message_spans(tokenizer, row) -> list[tuple[int, int]]:
    """Each message's character span in the rendered conversation: what rendering it adds to
    the messages before it (the template renders each message on its own)."""
    def render(messages):
        return tokenizer.apply_chat_template(messages, tools=row.get("tools"), tokenize=False)

    messages = [{k: v for k, v in m.items() if v is not None and k != "train"} for m in row["messages"]]
    spans, start = [], 0  # the tools block goes with the first message, never an assistant's
    for index in range(len(messages)):
        end = len(render(messages[: index + 1]))
        spans.append((start, end))
        start = end
    return spans


def test_axolotl_labels_exactly_the_flagged_messages_and_trains(axolotl_rows, tmp_path):
    rule, rows = axolotl_rows
    tokenizer = byte_level_tokenizer(rows)
    strategy = axolotl_strategy(tokenizer)
    batches = []
    for row in rows:
        flags = [message["train"] for message in row["messages"]]
        if rule == "final_assistant":
            assert flags.count(True) == 1 and flags[max(i for i, m in enumerate(row["messages"])
                                                        if m["role"] == "assistant")]
        spans = message_spans(tokenizer, row)
        text = tokenizer.apply_chat_template(
            [{k: v for k, v in m.items() if v is not None and k != "train"} for m in row["messages"]],
            tools=row.get("tools"), tokenize=False)
        tokenized = strategy.tokenize_prompt(json.loads(json.dumps(row)))  # Axolotl edits the row it is given
        ids, labels = tokenized["input_ids"], tokenized["labels"]
        assert tokenizer.decode(ids, skip_special_tokens=False) == text  # the same render
        offsets = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)["offset_mapping"]
        assert len(offsets) == len(ids)
        labelled_in = [0] * len(spans)
        for (begin, end), label in zip(offsets, labels):
            if label == IGNORE:
                continue
            owner = next(i for i, (start, stop) in enumerate(spans) if start <= begin and end <= stop)
            assert flags[owner], f"a token of message {owner} ({row['messages'][owner]['role']}) is labelled"
            labelled_in[owner] += 1
        assert all(labelled_in[i] > 0 for i, flag in enumerate(flags) if flag), labelled_in
        batches.append((ids, labels))

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=8192,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for ids, labels in batches[:2]:
        loss = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert len(losses) == min(2, len(batches)) and all(math.isfinite(loss) for loss in losses), losses
