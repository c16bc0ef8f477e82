"""The export writer checks what it writes: the contract reads every written row (nested
values included), every JSON line is checked against the Arrow types its card declares, and
an export that fails a check is not written at all."""

import numpy as np

from tests.split_files import split_text
from trajectory_assets.config import PipelineConfig
from trajectory_assets.exports.families.frames import ExportFrame
from trajectory_assets.exports.registry import EXPORTS_BY_NAME
from collections import Counter

from trajectory_assets.exports.writer import Broken, PartWriter, Written, finish_export
from trajectory_assets.io.storage import Storage
from schemas.export_row import checked_frame

ID, KEY = "a" * 32, "b" * 24
MESSAGES = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


def write(tmp_path, name: str, records: list[dict]) -> Written | Broken:
    """The rows written as ``name`` through the writer, as a family would hand them over."""
    export, store, config = EXPORTS_BY_NAME[name], Storage(str(tmp_path)), PipelineConfig()
    writer = PartWriter(store, export, config, "run", 0)
    rows = checked_frame(export.contract, records, [KEY] * len(records), ["train"] * len(records))
    writer.add(ExportFrame(rows, records, tokens=np.full(len(records), np.nan)))
    return finish_export(store, export, config, [writer.close()], Counter(), [], [], "test")


def sft_row(messages, **fields):
    return {"messages": messages, "trajectory_id": ID, "task_key": KEY, **fields}


def test_a_row_that_keeps_every_rule_is_written(tmp_path):
    written = write(tmp_path, "sft", [sft_row(MESSAGES, reward=1.0)])
    assert isinstance(written, Written) and written.manifest["rows"] == {"train": 1, "validation": 0}
    assert split_text(tmp_path / "exports" / "sft", "train").count("\n") == 1


def test_the_contract_reads_the_written_messages(tmp_path):
    """A tool message that answers no call, inside the written messages, fails the contract."""
    stray = [*MESSAGES, {"role": "tool", "tool_call_id": "nobody", "content": "r"}]
    broken = write(tmp_path, "sft", [sft_row(stray)])
    assert isinstance(broken, Broken) and broken.failed == ["contract"]
    assert any("role_shape" in line for line in broken.summary)
    assert not (tmp_path / "exports" / "sft").exists() or not any((tmp_path / "exports" / "sft").iterdir())


def test_a_json_line_off_its_declared_arrow_types_is_not_written(tmp_path):
    """The card declares reward a float64: a row holding text there would not load."""
    broken = write(tmp_path, "sft", [sft_row(MESSAGES, reward="high")])
    assert isinstance(broken, Broken) and "arrow_schema" in broken.failed
    (check,) = [check for check in broken.checks if check.name == "arrow_schema"]
    assert check.metadata["rows_off_schema"] == 1 and "reward" in check.metadata["examples"]


def test_a_nested_key_the_schema_lacks_is_off_schema(tmp_path):
    """A ShareGPT turn is {from, value}: a third key would be dropped or refused by a loader."""
    record = {"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q"},
                                {"from": "gpt", "value": "a", "weight": 1}], "trajectory_id": ID, "task_key": KEY}
    broken = write(tmp_path, "sft_hermes", [record])
    assert isinstance(broken, Broken) and broken.failed == ["arrow_schema"]
    (check,) = [check for check in broken.checks if check.name == "arrow_schema"]
    assert "conversations[2] has a key the schema lacks: 'weight'" in check.metadata["examples"]
