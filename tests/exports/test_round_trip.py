"""``read_back(render(x))`` gives back x's conversation for every export, on hand-made
rollouts with reasoning, parallel calls and results out of order (the conformance test
does the same over the whole corpus, through the files a run writes)."""

import orjson
import pytest

from tests.conftest import call_item, make_rollout, message_item, output_item, trajectory_frame
from tests.conformance.test_round_trip import MARKUP_EXPORTS, conversation, tools
from tests.exports.rendering import build
from trajectory_assets.config import DpoConfig, GrpoConfig, SftConfig, SplitConfig
from trajectory_assets.exports.registry import EXPORTS
from trajectory_assets.io.arrow_rows import table_from_records

REASONING = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Two cities: two calls."}]}
TOOLS = [{"type": "function", "name": "weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def rollouts():
    parallel = [REASONING, call_item("weather", '{"city": "Oslo"}', "c1"), call_item("weather", '{"city":"Rome"}', "c2"),
                output_item("c2", '{"temp": 20}'), output_item("c1", "rain"), message_item("Oslo: rain. Rome: 20.")]
    return [
        make_rollout(parallel, request_input="Weather in Oslo and Rome?", reward=1.0,
                     responses_create_params={"input": "Weather in Oslo and Rome?", "tools": TOOLS},
                     agent_ref={"name": "weather"}),
        make_rollout([message_item("I cannot tell.")], reward=0.0,
                     responses_create_params={"input": "Weather in Oslo and Rome?", "tools": TOOLS},
                     agent_ref={"name": "weather"}),
    ]


def as_read(export, records):
    """The rows as the trainer's loader gets them from the file."""
    if export.file_format == "parquet":
        return table_from_records(records, export.arrow_schema).to_pylist()
    return [orjson.loads(orjson.dumps(record)) for record in records]


@pytest.mark.parametrize("export", [e for e in EXPORTS if e.name != "on_policy_tokens"], ids=lambda e: e.name)
def test_read_back_of_render_is_the_conversation(export):
    frame = trajectory_frame(rollouts())
    config = {"sft": SftConfig(min_reward=None), "dpo": DpoConfig(), "grpo": GrpoConfig()}[export.family]
    built = build(export.name, frame, config, SplitConfig())
    assert built.records, export.name
    source = {row.trajectory_id: row for row in frame.itertuples()}
    markup = export.name in MARKUP_EXPORTS
    for row in as_read(export, built.records):
        back = export.read_back(row)
        if export.family == "dpo":
            chosen = orjson.loads(source[row["chosen_id"]].messages)
            assert conversation(back.messages + back.chosen, markup) == conversation(chosen, markup)
            continue
        first = row.get("trajectory_id") or (row.get("trajectory_ids") or row["extra_info"]["trajectory_ids"])[0]
        trajectory = source[first]
        messages = orjson.loads(trajectory.messages)
        expected = messages if export.family == "sft" else messages[: trajectory.prompt_length]
        assert conversation(back.messages, markup) == conversation(expected, markup)
        assert tools(back.tools, markup) == tools(orjson.loads(trajectory.tools), markup)
