"""Sources and datasets declared in YAML (defs/components.py): a catalog folder read into a
validated Project, and every error one line naming the file, line and attribute."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, SAMPLE
from trajectory_assets.defs.components import load_catalog
from trajectory_assets.exports.registry import EXPORTS_BY_NAME
from trajectory_assets.project import (
    DEFAULT_FRESHNESS_MINUTES,
    DEFAULT_REFRESH_CRON,
    DatasetSpec,
    Project,
    ProjectError,
    SourceSpec,
    validate,
)

SOURCE = "trajectory_assets.defs.components.RolloutSource"
DATASET = "trajectory_assets.defs.components.TrainingDataset"
TYPES = f"a catalog declares {SOURCE} or {DATASET}"
SWE_SOURCE = f"""\
type: {SOURCE}
attributes:
  name: swe
  uris: rollouts/swe
  storage: data/sources/swe
"""
SWE_SFT = f"""\
type: {DATASET}
attributes:
  name: swe_sft
  sources: [swe]
  storage: data/datasets/swe_sft
"""


def write(catalog: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (catalog / name).parent.mkdir(parents=True, exist_ok=True)
        (catalog / name).write_text(textwrap.dedent(text))
    return catalog


def error_of(catalog: Path) -> str:
    with pytest.raises(ProjectError) as raised:
        load_catalog(catalog)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_the_example_catalog_loads_one_source_read_by_two_datasets():
    project_folder = PROJECT_ROOT / "examples" / "two_datasets"
    project = load_catalog(project_folder / "catalog")

    (sample,) = project.sources
    assert (sample.name, sample.uris) == ("sample", (str(SAMPLE),))
    assert sample.storage == str(project_folder / "data" / "sources" / "sample")
    assert sample.config.redaction.emails and sample.declared_in == str(
        project_folder / "catalog" / "sources" / "sample" / "defs.yaml")
    assert [dataset.name for dataset in project.datasets] == ["grpo_math", "sft_v1"]
    grpo_math, sft_v1 = project.datasets
    assert grpo_math.sources == sft_v1.sources == (sample,) and project.readers(sample) == [grpo_math, sft_v1]
    assert (sft_v1.exports, grpo_math.exports) == (("sft", "trl_sft"), ("grpo", "trl_grpo"))
    assert sft_v1.storage == str(project_folder / "data" / "datasets" / "sft_v1")
    # each its own curation, and the defaults where it names none
    assert (sft_v1.config.sft.min_reward, grpo_math.config.sft.min_reward) == (0.8, 0.5)
    assert (sft_v1.config.grpo.pass_threshold, grpo_math.config.grpo.pass_threshold) == (1.0, 0.5)
    assert (sft_v1.refresh_cron, grpo_math.refresh_cron) == (DEFAULT_REFRESH_CRON, "0 4 * * *")
    assert sft_v1.freshness_minutes == DEFAULT_FRESHNESS_MINUTES


def test_a_catalog_loads_into_the_project_it_declares(tmp_path, monkeypatch):
    monkeypatch.setenv("TA_TEST_BUCKET", "team-rollouts")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "math.yaml").write_text(textwrap.dedent("""\
        grpo:
          pass_threshold: 0.5
        decontamination:
          benchmarks:
            - {name: gsm8k, path: benchmarks/gsm8k.jsonl, text_fields: [question]}
    """))
    write(tmp_path / "catalog", {
        "sources/swe/defs.yaml": f"""\
            type: {SOURCE}
            attributes:
              name: swe
              uris: [rollouts/swe, "s3://{{{{ env.TA_TEST_BUCKET }}}}/swe/"]
              storage: s3://team-data/sources/swe
              conversion: {{request_boundary: split}}
              redaction: {{allowlist: ["sk_test_[0-9]+"]}}
        """,
        "datasets/swe_sft/defs.yaml": f"""\
            type: {DATASET}
            attributes:
              name: swe_sft
              sources: [swe]
              storage: data/swe_sft
              exports: [trl_sft, sft]
              config:
                tokenizer: Qwen/Qwen3-8B
                sft: {{train_on: final_assistant}}
                decontamination:
                  benchmarks:
                    - {{name: swe_bench, path: /benchmarks/swe.jsonl, id_field: instance_id}}
              freshness_minutes: 90
        """,
        "datasets/swe_grpo/defs.yaml": f"""\
            type: {DATASET}
            attributes:
              name: swe_grpo
              sources: [swe]
              storage: data/swe_grpo
              config_file: configs/math.yaml
              refresh_cron: "30 */6 * * *"
        """,
    })
    project = load_catalog(tmp_path / "catalog")

    (swe,) = project.sources
    assert swe.uris == (str(tmp_path / "rollouts" / "swe"), "s3://team-rollouts/swe/")
    assert swe.storage == "s3://team-data/sources/swe"
    assert swe.config.conversion.request_boundary == "split"
    assert swe.config.redaction.allowlist == ["sk_test_[0-9]+"]
    swe_grpo, swe_sft = project.datasets
    assert (swe_sft.sources, swe_sft.storage) == ((swe,), str(tmp_path / "data" / "swe_sft"))
    assert (swe_sft.exports, swe_sft.config_file, swe_sft.freshness_minutes) == (("trl_sft", "sft"), None, 90)
    assert swe_sft.config.tokenizer == "Qwen/Qwen3-8B" and swe_sft.config.sft.train_on == "final_assistant"
    assert [b.path for b in swe_sft.config.decontamination.benchmarks] == ["/benchmarks/swe.jsonl"]
    assert swe_grpo.exports is None  # every export
    assert swe_grpo.config_file == str(tmp_path / "configs" / "math.yaml")
    assert swe_grpo.config.grpo.pass_threshold == 0.5 and swe_grpo.refresh_cron == "30 */6 * * *"
    assert [b.path for b in swe_grpo.config.decontamination.benchmarks] == [
        str(tmp_path / "benchmarks" / "gsm8k.jsonl")]
    assert project.benchmark_sets(swe) == [swe_grpo.config.decontamination, swe_sft.config.decontamination]


def test_relative_paths_are_relative_to_the_project_folder_wherever_the_call_is_made(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    write(tmp_path / "project" / "catalog", {
        "a/defs.yaml": f"""\
            type: {SOURCE}
            attributes: {{name: swe, uris: [./rollouts/../rollouts/swe, ../shared/swe, {tmp_path}/abs], storage: out}}
        """})
    (source,) = load_catalog(Path("../project/catalog")).sources
    project = tmp_path / "project"
    assert source.uris == (str(project / "rollouts" / "swe"), str(tmp_path / "shared" / "swe"), str(tmp_path / "abs"))
    assert source.storage == str(project / "out") and source.declared_in == str(project / "catalog" / "a" / "defs.yaml")


def test_a_message_names_a_file_inside_the_working_directory_relative_to_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "catalog", {"sources/swe/defs.yaml": SWE_SOURCE.replace("name: swe", "name: swe-1")})
    assert error_of(Path("catalog")).startswith(os.path.join("catalog", "sources", "swe", "defs.yaml") + ":3 ")


# Each case: the files of a catalog beside the good source and dataset (a file named as one
# of them replaces it), the file the message names, and what follows its name.
ERRORS = {
    "invalid YAML": (
        {"datasets/swe_sft/defs.yaml": f"type: {DATASET}\nattributes:\n  name: [swe_sft\n  sources: [swe]\n"},
        "datasets/swe_sft/defs.yaml", ":4: not valid YAML: expected ',' or ']', but got ':'"),
    "a file declaring nothing": (
        {"datasets/swe_sft/defs.yaml": ""},
        "datasets/swe_sft/defs.yaml", ":1: a declaration is a mapping of type and attributes"),
    "two declarations in one file": (
        {"sources/swe/defs.yaml": SWE_SOURCE + "---\n" + SWE_SOURCE},
        "sources/swe/defs.yaml", ":6: not valid YAML: but found another document"),
    "an unknown attribute": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT + "  export: [sft]\n"},
        "datasets/swe_sft/defs.yaml", ":6 attributes.export: unknown attribute; TrainingDataset takes name, "
                                      "sources, storage, exports, config, config_file, refresh_cron, "
                                      "freshness_minutes"),
    "an unknown key beside the attributes": (
        {"sources/swe/defs.yaml": SWE_SOURCE.replace("attributes:", "attribute:")},
        "sources/swe/defs.yaml", ":2 attribute: not a key Dagster reads here"),
    "a missing attribute": (
        {"sources/swe/defs.yaml": SWE_SOURCE.replace("  storage: data/sources/swe\n", "")},
        "sources/swe/defs.yaml", ":2 attributes.storage: required, and missing"),
    "a wrong type": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT + "  exports: [sft, 3]\n"},
        "datasets/swe_sft/defs.yaml", ":6 attributes.exports[1]: Input should be a valid string (got 3)"),
    "a wrong type once templates are rendered": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT + "  freshness_minutes: an hour\n"},
        "datasets/swe_sft/defs.yaml", ":6 attributes.freshness_minutes: Input should be a valid integer, unable to "
                                      "parse string as an integer (got 'an hour')"),
    "a template naming nothing": (
        {"sources/swe/defs.yaml": SWE_SOURCE.replace("data/sources/swe", "'{{ nothing }}'")},
        "sources/swe/defs.yaml", ":5 attributes.storage: UndefinedError: 'nothing' not found in scope, available scope "
                                 "is: "),
    "an environment variable that is not set": (
        {"sources/swe/defs.yaml": SWE_SOURCE.replace("data/sources/swe", "\"s3://{{ env('TA_UNSET') }}/swe\"")},
        "sources/swe/defs.yaml", ": Environment variable TA_UNSET is not set and no default value was provided. To "
                                 "provide a default value, use e.g. `env('TA_UNSET', 'default_value')`."),
    "an unknown component type": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT.replace("TrainingDataset", "TrainingDatasets")},
        "datasets/swe_sft/defs.yaml", f":1 type: unknown component type '{DATASET}s'; {TYPES}"),
    "another Dagster component": (
        {"datasets/script/defs.yaml": "type: dagster.PythonScriptComponent\nattributes: {execution: {path: x.py}}\n"},
        "datasets/script/defs.yaml", f":1 type: unknown component type 'dagster.PythonScriptComponent'; {TYPES}"),
    "no component type": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT.replace(f"type: {DATASET}\n", "")},
        "datasets/swe_sft/defs.yaml", f":1 type: missing; {TYPES}"),
    "a declaration inside another's folder": (
        {"sources/swe/v2/defs.yaml": SWE_SOURCE.replace("swe", "swe_v2")},
        "sources/swe/v2/defs.yaml", ": it is inside the folder of {catalog}/sources/swe/defs.yaml, and a folder "
                                    "declaring a component holds none below it; give it a folder of its own"),
    "an unknown export": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT + "  exports:\n    - sft\n    - sfft\n"},
        "datasets/swe_sft/defs.yaml", f":8 attributes.exports[1]: unknown export 'sfft'; choose from "
                                      f"{', '.join(EXPORTS_BY_NAME)}"),
    "an export listed twice": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT + "  exports: [sft, trl_sft, sft]\n"},
        "datasets/swe_sft/defs.yaml", ":6 attributes.exports[2]: export 'sft' is listed twice"),
    "no export": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT + "  exports: []\n"},
        "datasets/swe_sft/defs.yaml", ":6 attributes.exports: an empty list builds no export; leave exports out for "
                                      "every one"),
    "a config section's error": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT + "  config:\n    sft:\n      min_reward: high\n"},
        "datasets/swe_sft/defs.yaml", ":8 attributes.config.sft.min_reward: Input should be a valid number, unable "
                                      "to parse string as a number (got 'high')"),
    "a config rule spanning sections": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT + "  config:\n    sft: {over_token_budget: truncate}\n"},
        "datasets/swe_sft/defs.yaml", ":6 attributes.config: Value error, sft: over_token_budget: truncate needs "
                                      "`tokenizer` to measure rows "
                                      "(got {{'sft': {{'over_token_budget': 'truncate'}}}})"),
    "a source's section in a dataset's config": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT + "  config:\n    split: {validation_fraction: 0.2}\n"
                                                 "    redaction: {emails: true}\n"},
        "datasets/swe_sft/defs.yaml", ":8 attributes.config.redaction: redaction belongs to the source: set it in "
                                      "the attributes of the RolloutSource"),
    "config and config_file": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT + "  config: {}\n  config_file: config.yaml\n"},
        "datasets/swe_sft/defs.yaml", ":7 attributes.config_file: a dataset takes config or config_file, not both"),
    "a config file that is not there": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT + "  config_file: configs/none.yaml\n"},
        "datasets/swe_sft/defs.yaml", ":6 attributes.config_file: cannot read config {project}/configs/none.yaml: "
                                      "No such file or directory"),
    "a source's conversion error": (
        {"sources/swe/defs.yaml": SWE_SOURCE + "  conversion:\n    request_boundary: both\n"},
        "sources/swe/defs.yaml", ":7 attributes.conversion.request_boundary: Input should be 'merge' or 'split' "
                                 "(got 'both')"),
    "a cron Dagster does not run": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT + "  refresh_cron: 0 3 * *\n"},
        "datasets/swe_sft/defs.yaml", ":6 attributes.refresh_cron: '0 3 * *' is not a cron schedule Dagster runs: "
                                      "five fields, minute hour day month weekday (e.g. '0 3 * * *')"),
    "no freshness": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT + "  freshness_minutes: 0\n"},
        "datasets/swe_sft/defs.yaml", ":6 attributes.freshness_minutes: a number of minutes, at least 1 (got 0)"),
    "an empty path": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT.replace("data/datasets/swe_sft", "''")},
        "datasets/swe_sft/defs.yaml", ":5 attributes.storage: empty; name a folder, a file or an s3:// prefix"),
    # the rules that span declarations (project.validate, and the catalog's sources by name)
    "a dataset naming an unknown source": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT.replace("[swe]", "[swe, math]")},
        "datasets/swe_sft/defs.yaml", ":4 attributes.sources[1]: unknown source 'math'; the catalog declares swe"),
    "a source listed twice": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT.replace("[swe]", "\n    - swe\n    - swe")},
        "datasets/swe_sft/defs.yaml", ":6 attributes.sources[1]: source 'swe' is listed twice"),
    "two datasets writing one storage root": (
        {"datasets/swe_v2/defs.yaml": SWE_SFT.replace("name: swe_sft", "name: swe_v2").replace(
            "data/datasets/swe_sft", "data/datasets/../datasets/swe_sft/")},
        "datasets/swe_v2/defs.yaml", ":5 attributes.storage: {project}/data/datasets/swe_sft is already the storage "
                                     "of dataset 'swe_sft' ({catalog}/datasets/swe_sft/defs.yaml); each dataset "
                                     "writes its own root"),
    "two sources writing one storage root": (
        {"sources/math/defs.yaml": SWE_SOURCE.replace("name: swe", "name: math").replace("rollouts/swe",
                                                                                       "rollouts/math")},
        "sources/swe/defs.yaml", ":5 attributes.storage: {project}/data/sources/swe is already the storage of source "
                                 "'math' ({catalog}/sources/math/defs.yaml); each source writes its own root"),
    "a source inside another source's folder": (
        {"sources/all/defs.yaml": SWE_SOURCE.replace("name: swe", "name: all").replace(
            "uris: rollouts/swe", "uris: [rollouts/math, rollouts]").replace("sources/swe", "sources/all")},
        "sources/swe/defs.yaml", ":4 attributes.uris[0]: {project}/rollouts/swe is inside source 'all' "
                                 "({project}/rollouts): its files would be two sources' batches"),
    "a name that cannot be part of an asset key": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT.replace("name: swe_sft", "name: swe-sft")},
        "datasets/swe_sft/defs.yaml", ":3 attributes.name: 'swe-sft' cannot be part of an asset key: use letters, "
                                      "digits and underscores, starting with a letter"),
    "two sources of one name": (
        {"sources/swe_copy/defs.yaml": SWE_SOURCE.replace("rollouts/swe", "rollouts/swe_copy").replace(
            "sources/swe", "sources/swe_copy")},
        "sources/swe_copy/defs.yaml", ":3 attributes.name: the name 'swe' is already the source declared in "
                                      "{catalog}/sources/swe/defs.yaml; every source and dataset needs a name of "
                                      "its own"),
    "a dataset named as a source": (
        {"datasets/swe_sft/defs.yaml": SWE_SFT.replace("name: swe_sft", "name: swe")},
        "datasets/swe_sft/defs.yaml", ":3 attributes.name: the name 'swe' is already the source declared in "
                                      "{catalog}/sources/swe/defs.yaml; every source and dataset needs a name of "
                                      "its own"),
}


@pytest.mark.parametrize("files, named, message", ERRORS.values(), ids=ERRORS.keys())
def test_an_error_is_one_line_naming_the_file_line_and_attribute(tmp_path, files, named, message):
    catalog = write(tmp_path / "catalog", {"sources/swe/defs.yaml": SWE_SOURCE,
                                           "datasets/swe_sft/defs.yaml": SWE_SFT, **files})
    expected = f"{catalog / named}{message.format(catalog=catalog, project=tmp_path)}"
    if message.endswith("is: "):  # the rest lists Dagster's template scope
        assert error_of(catalog).startswith(expected)
    else:
        assert error_of(catalog) == expected


def test_a_catalog_folder_that_is_not_there_or_declares_nothing_is_an_error(tmp_path):
    assert error_of(tmp_path / "catalog") == f"{tmp_path / 'catalog'}: there is no catalog folder there"
    (tmp_path / "catalog" / "sources").mkdir(parents=True)
    assert error_of(tmp_path / "catalog") == f"{tmp_path / 'catalog'}: the catalog declares nothing (no defs.yaml " \
                                             "under it)"


def test_a_dataset_reading_a_source_the_project_does_not_declare_is_an_error():
    """A Project built in code (the loader resolves names, so it never builds one)."""
    stray = SourceSpec("swe", ("/rollouts/swe",), "/data/swe")
    with pytest.raises(ProjectError, match=r"^the environment's dataset \(sources\[0\]\): unknown source 'swe'; "
                                           r"the project declares none$"):
        validate(Project((), (DatasetSpec("swe_sft", (stray,), "/data/swe_sft"),)))
