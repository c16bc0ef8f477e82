"""No planted secret survives into anything the pipeline writes."""

import json

import pyarrow.parquet as pq

from tests.conftest import call_item, make_rollout, message_item, output_item, write_jsonl
from tests.formats.test_redaction import MISSED, SECRETS, STS_SECRET, STS_TOKEN
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


def test_secrets_at_line_starts_of_tool_outputs_never_reach_storage(tmp_path):
    """The audit's misses, each at the start of a line of tool output (after `\\n`, `\\t`, ...)."""
    planted = {case: parts for case, (_, _, parts) in MISSED.items()}
    outputs = [f"$ step {i}\n{text}\nexit 0" for i, (text, _, _) in enumerate(MISSED.values())]
    outputs += [f"cols:\t{MISSED['akia'][0]}\r\n{MISSED['db_password'][0]}",
                json.dumps({"stdout": f"ok\n{MISSED['truncated_pem'][0]}", "code": 0})]
    calls = [item for i, output in enumerate(outputs)
             for item in (call_item("shell", json.dumps({"cmd": f"step {i}"}), f"c{i}"), output_item(f"c{i}", output))]
    sts = {"AccessKeyId": "ASIAIOSFODNN7EXAMPLE", "SecretAccessKey": STS_SECRET, "SessionToken": STS_TOKEN}
    rollouts = [make_rollout([*calls, message_item("done")], request_input="dump the creds", agent_ref={"name": "a"},
                             **sts),  # STS credentials as top-level keys of the rollout line too
                make_rollout([message_item("ok")], request_input="clean task", agent_ref={"name": "a"})]
    write_jsonl(tmp_path / "in" / "leaky.jsonl", rollouts)
    config = tmp_path / "c.yaml"
    config.write_text("sft:\n  min_reward: null\n")
    assert main(["run", "--source", str(tmp_path / "in"), "--storage", str(tmp_path / "out"), "--config", str(config)]) == 0
    texts = dict(every_written_text(tmp_path / "out"))
    assert any("exports" in str(path) for path in texts)
    for path in (tmp_path / "out").rglob("*"):  # every file, whatever its format
        if path.is_file():
            data = path.read_bytes()
            for case, parts in planted.items():
                for part in parts:
                    assert part.encode() not in data, f"{case} survived in {path}"
    for path, text in texts.items():  # decoded text too (parquet pages may be compressed)
        for case, parts in planted.items():
            for part in parts:
                assert part not in text, f"{case} survived in {path}"
    stats = json.loads((tmp_path / "out" / "reports" / "stats.json").read_text())
    assert stats["redactions"]["trajectories"] == 1
    by_type = stats["redactions"]["by_type"]
    assert by_type["password"] >= 4 and by_type["private_key"] == 4 and by_type["basic_auth"] == 1
    assert by_type["aws_secret_access_key"] >= 3 and by_type["aws_session_token"] == 2
