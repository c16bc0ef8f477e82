"""Through a whole run: no planted secret reaches anything written, look-alikes reach the
exports verbatim, and the report and every dataset card say what redaction did."""

import json

import pyarrow.parquet as pq
import pytest

from tests.split_files import split_text
from tests.conftest import call_item, make_rollout, message_item, output_item, write_jsonl
from tests.fixtures.hermes_rows import SYSTEM, cli_row, gpt, human
from tests.fixtures.secrets import (
    GITHUB_PAT, ISSUE_KINDS, ISSUE_LOOKALIKES, LOOKALIKES, OPENAI_PROJECT, PLANTED, POSITIONS, all_positions,
)
from trajectory_assets.cli import main

CODE = LOOKALIKES["python_kwargs"] + "\n" + LOOKALIKES["docstring"] + "\n" + LOOKALIKES["passwd_prompts"]


def planted_rollouts() -> list:
    """Every planted secret in a tool output, its call's arguments and the final answer; a
    Hermes row leaking one; a clean rollout with code and a terminal session; a broken line."""
    leaks = [make_rollout([call_item("shell", json.dumps({"cmd": "cat", "input": case.text}), f"c{i}"),
                           output_item(f"c{i}", f"$ cat\n{case.text}\n"), message_item(f"It holds:\n{case.text}")],
                          request_input=f"show {case.name}", agent_ref={"name": "a"})
             for i, case in enumerate(PLANTED)]
    hermes = cli_row([SYSTEM, human(f"my key is {OPENAI_PROJECT}"), gpt("Please rotate it.")])
    clean = make_rollout([call_item("shell", json.dumps({"cmd": "passwd"}), "c1"), output_item("c1", CODE),
                          message_item(CODE)], request_input="change the password", agent_ref={"name": "a"})
    return [*leaks, hermes, clean, "not json but leaks " + GITHUB_PAT, *every_place(ISSUE_KINDS),
            *every_place(ISSUE_LOOKALIKES.values())]


def every_place(texts) -> list:
    """Each text (or planted case) in every place of both formats: NeMo Gym tool output, call
    arguments, user / system / developer messages, reasoning, answer; Hermes system, human,
    reasoning, assistant text, tool call, tool response."""
    return [row for text in texts for row in all_positions(getattr(text, "text", text)).values()]


def escaped(text: str) -> set[str]:
    """A line of text as a JSON string holds it, directly or in a JSON document in a string."""
    once = json.dumps(text)[1:-1]
    return {text, once, json.dumps(once)[1:-1]}


def every_written_text(root):
    for path in root.rglob("*"):
        if path.suffix == ".parquet":
            yield path, json.dumps(pq.read_table(path).to_pylist())
        elif path.is_file():
            yield path, path.read_bytes().decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def redacted_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("redaction")
    write_jsonl(root / "in" / "leaky.jsonl", planted_rollouts())
    config = root / "c.yaml"
    config.write_text("sft:\n  min_reward: null\n")
    assert main(["run", "--source", str(root / "in"), "--storage", str(root / "out"), "--config", str(config)]) == 0
    return root / "out"


def test_no_planted_secret_reaches_anything_written(redacted_run):
    texts = dict(every_written_text(redacted_run))
    assert any("exports" in str(path) for path in texts)
    for path, text in texts.items():
        for case in PLANTED:
            for secret in case.secrets:
                assert secret not in text and secret.replace("/", "\\/") not in text, f"{case.name} in {path}"
        assert OPENAI_PROJECT not in text and GITHUB_PAT not in text, path


def test_the_report_counts_and_names_what_was_redacted(redacted_run):
    stats = json.loads((redacted_run / "reports" / "stats.json").read_text())
    redactions = stats["redactions"]
    # each leak, the Hermes row, the broken line, the issue's kinds in every place (and no look-alike)
    assert redactions["trajectories"] == len(PLANTED) + 2 + len(ISSUE_KINDS) * len(POSITIONS)
    assert len(redactions["trajectory_ids"]) == redactions["trajectories"]
    assert {kind for case in PLANTED for kind in case.kinds} <= set(redactions["by_type"])
    assert redactions["by_type"]["github_token"] >= 3 + 1  # classic token x 3 places + the quarantined line
    assert redactions["detectors"] and redactions["detectors"][0].startswith("detect-secrets ")
    markdown = (redacted_run / "reports" / "stats.md").read_text()
    assert "Detector: detect-secrets" in markdown and "| private_key |" in markdown


def test_code_and_terminal_text_reach_the_exports_verbatim(redacted_run):
    rows = [json.loads(line) for split in ("train", "validation")
            for line in split_text(redacted_run / "exports" / "sft", split).splitlines()]
    clean = next(row for row in rows if row["messages"][0]["content"] == "change the password")
    assert clean["messages"][-1]["content"] == CODE
    assert any(m.get("content") == CODE for m in clean["messages"] if m["role"] == "tool")


def test_the_issues_look_alikes_reach_the_exports_verbatim(redacted_run):
    exported = "\n".join(text for path, text in every_written_text(redacted_run / "exports"))
    for name, text in ISSUE_LOOKALIKES.items():
        for line in text.splitlines():
            assert any(form in exported for form in escaped(line)), f"{name}: {line!r}"


def test_every_dataset_card_says_redaction_ran_and_with_what(redacted_run):
    for card in (redacted_run / "exports").glob("*/README.md"):
        line = next(line for line in card.read_text().splitlines() if line.startswith("- secrets:"))
        assert "replaced by typed placeholders at ingest, by detect-secrets 1.5.0 with trajectory-assets rules" in line
    manifest = json.loads((redacted_run / "exports" / "sft" / "manifest.json").read_text())
    assert all(source["redaction"].startswith("detect-secrets") for source in manifest["sources"])


def test_switched_off_nothing_is_redacted_and_the_card_says_so(tmp_path):
    write_jsonl(tmp_path / "in" / "leaky.jsonl", planted_rollouts()[:1])
    config = tmp_path / "c.yaml"
    config.write_text("redaction:\n  enabled: false\nsft:\n  min_reward: null\n")
    assert main(["run", "--source", str(tmp_path / "in"), "--storage", str(tmp_path / "out"), "--config", str(config)]) == 0
    sft = tmp_path / "out" / "exports" / "sft"
    assert PLANTED[0].secrets[0] in split_text(sft, "train") + split_text(sft, "validation")
    assert "- secrets: **not redacted**" in (sft / "README.md").read_text()
    assert "Redaction was off" in (tmp_path / "out" / "reports" / "stats.md").read_text()


def test_users_rules_apply_in_a_run(tmp_path):
    token = "acme_live_" + "7Hq2Lx9Vb3Nc5Tm1"
    write_jsonl(tmp_path / "in" / "a.jsonl", [
        make_rollout([message_item(f"deploy with {token} and {GITHUB_PAT}")], request_input="deploy")])
    config = tmp_path / "c.yaml"
    config.write_text("redaction:\n  allowlist: ['ghp_[A-Za-z0-9]{36}']\n"
                      "  extra_rules:\n    acme_token: 'acme_live_[A-Za-z0-9]{16}'\nsft:\n  min_reward: null\n")
    assert main(["run", "--source", str(tmp_path / "in"), "--storage", str(tmp_path / "out"), "--config", str(config)]) == 0
    sft = tmp_path / "out" / "exports" / "sft"
    text = split_text(sft, "train") + split_text(sft, "validation")
    assert "[REDACTED:acme_token]" in text and token not in text and GITHUB_PAT in text
    assert "1 extra rule(s) + 1 allowlist pattern(s)" in (sft / "README.md").read_text()
