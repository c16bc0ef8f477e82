"""Writes the bundled sample under samples/rollouts/ (committed; rerun after editing).

Small, hand-written NeMo Gym rollouts that exercise every shape the pipeline accepts:
current ``response.output`` and legacy top-level ``output``, string and list inputs,
``developer`` roles, reasoning, parallel tool calls, several rollouts per task (DPO / GRPO
groups), ``mask_sample``, a gzip file, and two lines that must be quarantined. The weather
collection was served with token capture (token ids and log probs on each model call's last
item) and has its materialized inputs beside it, as ``ng_collect_rollouts`` writes them.

    python samples/make_sample.py
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "rollouts"

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}
CALC_TOOL = {
    "type": "function",
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    "strict": False,
}


def message(text: str, msg_id: str) -> dict:
    return {
        "type": "message",
        "id": msg_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call(name: str, arguments: dict, call_id: str) -> dict:
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": json.dumps(arguments), "status": "completed"}


def result(call_id: str, output: str) -> dict:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def reasoning(text: str, item_id: str) -> dict:
    return {"type": "reasoning", "id": item_id, "summary": [{"type": "summary_text", "text": text}],
            "encrypted_content": None}


def with_tokens(item: dict, prompt_length: int, generated: int, seed: int) -> dict:
    """The item as a model call's last item carrying its token data (made-up ids)."""
    prompt = [(seed * 31 + n) % 50_000 for n in range(prompt_length)]
    generation = [(seed * 17 + n) % 50_000 for n in range(generated)]
    return {**item, "prompt_token_ids": prompt, "generation_token_ids": generation,
            "generation_log_probs": [round(-0.01 * (n % 7), 2) for n in range(generated)]}


def rollout(request_input, output, reward, *, task, rollout_index, agent, tools=None, model="sample-model-7b",
            usage=(120, 40), **extra) -> dict:
    row = {
        "responses_create_params": {"input": request_input, "tools": tools or [], "temperature": 1.0},
        "response": {
            "id": f"resp_{agent}_{task}_{rollout_index}",
            "object": "response",
            "model": model,
            "status": "completed",
            "output": output,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1], "total_tokens": sum(usage)},
        },
        "reward": reward,
        "_ng_task_index": task,
        "_ng_rollout_index": rollout_index,
        "agent_ref": {"type": "responses_api_agents", "name": agent},
    }
    row.update(extra)
    return row


def weather_rollouts() -> list[dict]:
    prompt = [
        {"role": "developer", "content": "You are a concise weather assistant. Use tools for live data."},
        {"role": "user", "content": [{"type": "input_text", "text": "What's the weather in Paris and Oslo?"}]},
    ]
    good = [
        reasoning("Two cities: call the tool for both in parallel.", "rs_1"),
        call("get_weather", {"city": "Paris"}, "call_p"),
        with_tokens(call("get_weather", {"city": "Oslo"}, "call_o"), 48, 30, seed=1),
        result("call_p", '{"city": "Paris", "temp_c": 22, "sky": "sunny"}'),
        result("call_o", '{"city": "Oslo", "temp_c": 9, "sky": "rain"}'),
        message("Paris: 22°C and sunny. Oslo: 9°C with rain.", "msg_1"),
    ]
    # the second call's prompt repeats everything before it (NeMo RL's contiguity)
    first = good[2]
    good[-1] = {**good[-1], "prompt_token_ids": first["prompt_token_ids"] + first["generation_token_ids"]
                + [7, 8, 9], "generation_token_ids": [11, 12, 13, 14], "generation_log_probs": [-0.1, 0.0, -0.3, 0.0]}
    lazy = [message("It is probably mild in both cities.", "msg_2")]
    half = [
        call("get_weather", {"city": "Paris"}, "call_p2"),
        result("call_p2", '{"city": "Paris", "temp_c": 22, "sky": "sunny"}'),
        message("Paris is 22°C and sunny; I could not check Oslo.", "msg_3"),
    ]
    agent = "weather_simple_agent"
    return [  # the verifier's expected_answer is also in the materialized inputs (weather_inputs)
        rollout(prompt, good, 1.0, task=0, rollout_index=0, agent=agent, tools=[WEATHER_TOOL],
                expected_answer="Paris 22 sunny; Oslo 9 rain"),
        rollout(prompt, lazy, 0.0, task=0, rollout_index=1, agent=agent, tools=[WEATHER_TOOL],
                expected_answer="Paris 22 sunny; Oslo 9 rain"),
        rollout(prompt, half, 0.5, task=0, rollout_index=2, agent=agent, tools=[WEATHER_TOOL],
                expected_answer="Paris 22 sunny; Oslo 9 rain"),
    ]


def weather_inputs() -> list[dict]:
    """``rollouts_materialized_inputs.jsonl``: the collector's expanded input rows."""
    return [{"responses_create_params": {"input": "..."}, "agent_ref": {"name": "weather_simple_agent"},
             "expected_answer": "Paris 22 sunny; Oslo 9 rain", "units": "celsius", "_ng_task_index": 0,
             "_ng_rollout_index": index} for index in range(3)]


def math_rollouts() -> list[dict]:
    rows = []
    problems = [("What is 17 * 23?", "391", "17 * 23"), ("What is 2**10 - 24?", "1000", "2**10 - 24"),
                ("What is 144 / 12 + 7?", "19", "144 / 12 + 7")]
    for task, (question, answer, expression) in enumerate(problems):
        request = [{"role": "system", "content": "Solve the problem. Put the final answer in \\boxed{}."},
                   {"role": "user", "content": question}]
        correct = [
            reasoning("Use the calculator to avoid slips.", f"rs_{task}"),
            call("calculator", {"expression": expression}, f"calc_{task}"),
            result(f"calc_{task}", answer),
            message(f"The answer is \\boxed{{{answer}}}.", f"m_{task}_ok"),
        ]
        wrong = [message("The answer is \\boxed{42}.", f"m_{task}_bad")]
        rows.append(rollout(request, correct, 1.0, task=task, rollout_index=0, agent="math_tool_agent",
                            tools=[CALC_TOOL], expected_answer=answer))
        rows.append(rollout(request, wrong, 0.0, task=task, rollout_index=1, agent="math_tool_agent",
                            tools=[CALC_TOOL], expected_answer=answer))
    return rows


def legacy_rows() -> list[dict]:
    """The seed doc's older shape: top-level ``output``, string input, no collector fields."""
    return [
        {
            "responses_create_params": {"input": "Name a prime number greater than 10."},
            "output": [message("13 is a prime number greater than 10.", "legacy_1")],
            "reward": 1,
            "metadata": {"task_type": "trivia"},
        },
        {
            "responses_create_params": {"input": "Name a prime number greater than 10."},
            "output": [message("12.", "legacy_2")],
            "reward": 0,
            "metadata": {"task_type": "trivia"},
        },
        {
            # the verifier marked this reward unreliable: kept as a trajectory, left out of SFT/DPO
            "responses_create_params": {"input": "Spell 'rollout' backwards."},
            "output": [message("tuollor", "legacy_3")],
            "reward": 1.0,
            "mask_sample": True,
        },
    ]


def main() -> None:
    (OUT / "weather").mkdir(parents=True, exist_ok=True)
    (OUT / "weather" / "rollouts.jsonl").write_text(jsonl(weather_rollouts()), encoding="utf-8")
    (OUT / "weather" / "rollouts_materialized_inputs.jsonl").write_text(jsonl(weather_inputs()), encoding="utf-8")
    with open(OUT / "math_rollouts.jsonl.gz", "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as handle:  # mtime=0: reproducible bytes
            handle.write(jsonl(math_rollouts()).encode())
    legacy = jsonl(legacy_rows())
    # two lines that must be quarantined, not lost: a truncated write and a non-rollout object
    legacy += '{"responses_create_params": {"input": "trunc\n'
    legacy += json.dumps({"prompt": "not a rollout", "score": 3}) + "\n"
    (OUT / "legacy_rollouts.jsonl").write_text(legacy, encoding="utf-8")


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


if __name__ == "__main__":
    main()
