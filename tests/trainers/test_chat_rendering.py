"""Every row of every chat export, loaded as a trainer loads it, rendered through chat templates.

Two templates written here stand for the two kinds real models ship: one writes
`arguments | tojson` unconditionally (as Qwen2.5's and the Llama 3.1/3.2 tool templates do), the
other branches on `arguments is string` (as Qwen3's does). Both render `reasoning_content` on the
assistant turns that carry it. Every tool call must come out as a JSON object (never a quoted,
escaped string) and every reasoning exactly once. The real Qwen2.5, Qwen3 and Llama 3.1
templates TRL ships (`trl/chat_templates/`, byte copies of the models' own) are rendered too.

Rows are rendered with `tokenizer.apply_chat_template`, as TRL, NeMo RL and verl do; the
tokenizer is built here (nothing is downloaded).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.split_files import split_text
from tests.trainers.conftest import trainer_libs_missing

pytestmark = pytest.mark.trainers

MISSING = trainer_libs_missing()  # skips the module outside CI when the libraries are absent

if not MISSING:
    import datasets
    import trl
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    datasets.disable_progress_bars()


_TEMPLATE = r"""
{%- if tools %}{{ '<|im_start|>system\n<tools>' }}
{%- for tool in tools %}{{ '\n' }}{{ tool | tojson }}{% endfor %}
{{- '\n</tools><|im_end|>\n' }}{% endif %}
{%- for message in messages %}
{{- '<|im_start|>' + message.role + '\n' }}
{%- if message.reasoning_content %}{{ '<|think|>' + message.reasoning_content + '<|/think|>\n' }}{% endif %}
{{- message.content }}
{%- for call in message.tool_calls or [] %}
{{- '\n<|call|>{"name": ' }}{{ call.function.name | tojson }}{{ ', "arguments": ' }}ARGUMENTS{{ '}<|/call|>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
""".strip()
# Qwen2.5 / Llama 3.1 style: whatever arguments hold goes through tojson
TOJSON_TEMPLATE = _TEMPLATE.replace("ARGUMENTS", "{{ call.function.arguments | tojson }}")
# Qwen3 style: a string is written as it is, an object through tojson
BRANCHING_TEMPLATE = _TEMPLATE.replace(
    "ARGUMENTS",
    "{%- if call.function.arguments is string %}{{ call.function.arguments }}"
    "{%- else %}{{ call.function.arguments | tojson }}{% endif %}",
)
CALL = re.compile(r"<\|call\|>(.*?)<\|/call\|>", re.S)
# the exports whose rows hold whole conversations (the others hold prompts, which may have no calls)
CONVERSATION_EXPORTS = ("trl_sft", "nemo_rl_sft", "trl_dpo", "nemo_rl_dpo")

# export -> how one of its rows becomes the conversations a trainer renders, and its tools
CHAT_EXPORTS: dict[str, Callable[[dict], tuple[list[list[dict]], Any]]] = {
    "trl_sft": lambda row: ([row["messages"]], row["tools"]),
    "nemo_rl_sft": lambda row: ([row["messages"]], row["tools"]),
    "trl_dpo": lambda row: ([row["prompt"] + row["chosen"], row["prompt"] + row["rejected"]], row["tools"]),
    "nemo_rl_dpo": lambda row: ([row["context"] + c["completion"] for c in row["completions"]], row["tools"]),
    "trl_grpo": lambda row: ([row["prompt"]], row["tools"]),
    "verl": lambda row: ([row["prompt"]], row["extra_info"]["tools"]),
}


def tokenizer_with(template: str) -> PreTrainedTokenizerFast:
    words = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>", bos_token="<|begin_of_text|>")
    tokenizer.chat_template = template
    return tokenizer


def shipped_template(name: str) -> str:
    return (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text()


def loaded_rows(folder: Path, cache_dir: str) -> list[dict]:
    """The rows as the trainer reads them: `load_dataset("<folder>")`, every split."""
    loaded = datasets.load_dataset(str(folder), cache_dir=cache_dir)
    return [row for split in loaded.values() for row in split]


def conversations(folder: Path, cache_dir: str) -> Iterator[tuple[list[dict], Any]]:
    for row in loaded_rows(folder, cache_dir):
        chats, tools = CHAT_EXPORTS[folder.name](row)
        for chat in chats:
            yield chat, tools


def present(message: dict, key: str) -> Any:
    return message.get(key) or None


def rendering_problems(rendered: str, messages: list[dict]) -> list[str]:
    """What a template made of a conversation that a model would learn wrong."""
    problems = []
    calls = [call for message in messages for call in present(message, "tool_calls") or []]
    blocks = CALL.findall(rendered)
    if len(blocks) != len(calls):
        problems.append(f"{len(calls)} calls, {len(blocks)} rendered")
    for block, call in zip(blocks, calls):
        arguments = json.loads(block)["arguments"]
        if not isinstance(arguments, dict):
            problems.append(f"{call['function']['name']}: arguments rendered as a {type(arguments).__name__}")
        elif arguments != call["function"]["arguments"]:
            problems.append(f"{call['function']['name']}: arguments changed")
    reasoning = [m["reasoning_content"] for m in messages if present(m, "reasoning_content")]
    if rendered.count("<|think|>") != len(reasoning):
        problems.append(f"{len(reasoning)} reasonings, {rendered.count('<|think|>')} think blocks")
    texts = [present(m, "content") or "" for m in messages]
    for text in reasoning:
        occurrences = sum(other.count(text) for other in texts + reasoning)
        if rendered.count(text) != occurrences:  # not also written a second time (inline in the content)
            problems.append(f"reasoning rendered {rendered.count(text)} times, written {occurrences}")
    return problems


@pytest.mark.parametrize("template", ["tojson", "branching"])
@pytest.mark.parametrize("export", sorted(CHAT_EXPORTS))
def test_every_row_renders_calls_as_objects_and_reasoning_once(run_exports, hf_cache, export, template):
    tokenizer = tokenizer_with(TOJSON_TEMPLATE if template == "tojson" else BRANCHING_TEMPLATE)
    rendered_calls = rendered_reasoning = 0
    problems = []
    for messages, tools in conversations(run_exports / export, hf_cache):
        rendered = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
        problems += [f"{export}: {problem}" for problem in rendering_problems(rendered, messages)]
        rendered_calls += len(CALL.findall(rendered))
        rendered_reasoning += rendered.count("<|think|>")
    assert not problems, "\n".join(sorted(set(problems)))
    if export in CONVERSATION_EXPORTS:
        assert rendered_calls > 0, "the run's conversations hold tool calls"
        assert rendered_reasoning > 0, "the run's conversations hold reasoning"


def test_the_check_catches_double_encoded_arguments_in_openai_strings(sample_exports):
    """The seed `sft` keeps OpenAI's argument strings: under `| tojson` every call comes out quoted,
    which is the defect the template flavors exist to avoid."""
    tokenizer = tokenizer_with(TOJSON_TEMPLATE)
    lines = [json.loads(line) for line in split_text(sample_exports / "sft", "train").splitlines()]
    with_calls = [row for row in lines if any(m.get("tool_calls") for m in row["messages"])]
    assert with_calls
    for row in with_calls:
        rendered = tokenizer.apply_chat_template(row["messages"], tools=row.get("tools"), tokenize=False)
        problems = rendering_problems(rendered, row["messages"])
        assert problems and all("rendered as a str" in p for p in problems if "arguments" in p), problems


def test_the_check_catches_reasoning_written_twice():
    tokenizer = tokenizer_with(BRANCHING_TEMPLATE)
    messages = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "<|think|>look it up<|/think|>\nok",
                 "reasoning_content": "look it up"}]
    problems = rendering_problems(tokenizer.apply_chat_template(messages, tokenize=False), messages)
    assert any("think blocks" in problem for problem in problems), problems


QWEN_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)


@pytest.mark.parametrize("shipped", ["qwen2_5", "qwen3"])
@pytest.mark.parametrize("export", sorted(CHAT_EXPORTS))
def test_the_shipped_qwen_templates_render_every_call_as_an_object(run_exports, hf_cache, export, shipped):
    tokenizer = tokenizer_with(shipped_template(shipped))
    strings = objects = 0
    for messages, tools in conversations(run_exports / export, hf_cache):
        calls = sum(len(present(m, "tool_calls") or []) for m in messages)
        if any("<tool_call>" in (present(m, "content") or "") for m in messages):
            continue  # the model wrote literal tags into its text: not calls, and not parseable as such
        rendered = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
        body = rendered.split("<|im_end|>", 1)[1] if tools else rendered  # past the tools header's example
        blocks = [json.loads(block) for block in QWEN_CALL.findall(body)]
        assert len(blocks) == calls
        objects += sum(isinstance(block["arguments"], dict) for block in blocks)
        strings += sum(isinstance(block["arguments"], str) for block in blocks)
    assert strings == 0, f"{strings} calls double-encoded ({objects} as objects)"
    assert objects > 0 or export not in CONVERSATION_EXPORTS


@pytest.mark.parametrize("export", sorted(CHAT_EXPORTS))
def test_the_shipped_llama_3_1_template_renders_every_single_call_as_an_object(run_exports, hf_cache, export):
    tokenizer = tokenizer_with(shipped_template("llama3_1"))
    checked = 0
    for messages, tools in conversations(run_exports / export, hf_cache):
        if any(len(present(m, "tool_calls") or []) > 1 for m in messages):
            with pytest.raises(Exception, match="single tool-calls"):  # the template's own refusal
                tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
            continue
        rendered = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
        for message in messages:
            for call in present(message, "tool_calls") or []:
                expected = json.dumps({"name": call["function"]["name"],
                                       "parameters": call["function"]["arguments"]}, ensure_ascii=False)
                assert expected in rendered, expected
                checked += 1
    assert checked > 0 or export not in CONVERSATION_EXPORTS, "the run's conversations hold single tool calls"
