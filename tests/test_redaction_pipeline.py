"""No planted secret survives into anything the pipeline writes."""

import json

import pyarrow.parquet as pq

from tests.conftest import call_item, make_rollout, message_item, output_item, write_jsonl
from tests.formats.test_redaction import SECRETS
from trajectory_assets.cli import main

PLANTED = {**SECRETS, "url_password": "hunter2-db-pass", "password": "Tr0ub4dor-and-3"}


def planted_rollouts():
    leaky_output = " ".join(SECRETS.values()) + " postgres://app:hunter2-db-pass@db:5432/x"
    return [
        make_rollout(
            [call_item("shell", json.dumps({"cmd": "env", "password": PLANTED["password"]}), "c1"),
             output_item("c1", leaky_output), message_item("done, the key is " + SECRETS["openai_api_key"])],
            request_input="print the env", agent_ref={"name": "a"},
        ),
        make_rollout([message_item("ok")], request_input="clean task", agent_ref={"name": "a"}),
        "not json but leaks " + SECRETS["github_token"],  # quarantined, and redacted there too
    ]


def every_written_text(root):
    for path in root.rglob("*"):
        if path.suffix == ".parquet":
            yield path, json.dumps(pq.read_table(path).to_pylist())
        elif path.is_file() and path.suffix in (".jsonl", ".json", ".md"):
            yield path, path.read_text()


def test_no_planted_secret_reaches_any_output(tmp_path):
    write_jsonl(tmp_path / "in" / "leaky.jsonl", planted_rollouts())
    config = tmp_path / "c.yaml"
    config.write_text("sft:\n  min_reward: null\n")
    assert main(["run", "--source", str(tmp_path / "in"), "--storage", str(tmp_path / "out"), "--config", str(config)]) == 0
    texts = dict(every_written_text(tmp_path / "out"))
    assert any("exports" in str(path) for path in texts)
    for path, text in texts.items():
        for kind, secret in PLANTED.items():
            assert secret not in text, f"{kind} survived in {path}"
    stats = json.loads((tmp_path / "out" / "reports" / "stats.json").read_text())
    assert stats["redactions"]["trajectories"] == 2
    assert stats["redactions"]["by_type"]["openai_api_key"] == 2  # in the tool output and the final answer
    assert stats["redactions"]["by_type"]["github_token"] == 2  # one of them in the quarantined line
    sft = (tmp_path / "out" / "exports" / "sft" / "train.jsonl").read_text() + (
        tmp_path / "out" / "exports" / "sft" / "validation.jsonl").read_text()
    assert "[REDACTED:openai_api_key]" in sft


def test_redaction_can_be_switched_off(tmp_path):
    write_jsonl(tmp_path / "in" / "leaky.jsonl", planted_rollouts()[:1])
    config = tmp_path / "c.yaml"
    config.write_text("redaction:\n  enabled: false\nsft:\n  min_reward: null\n")
    assert main(["run", "--source", str(tmp_path / "in"), "--storage", str(tmp_path / "out"), "--config", str(config)]) == 0
    assert SECRETS["openai_api_key"] in (tmp_path / "out" / "exports" / "sft" / "train.jsonl").read_text() + (
        tmp_path / "out" / "exports" / "sft" / "validation.jsonl").read_text()
