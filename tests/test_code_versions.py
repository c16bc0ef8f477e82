"""Each asset's code version follows the code and config it is computed with: an edit to one
module changes the versions of the assets whose computation imports it, and no other."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import edited
from trajectory_assets import PROJECT_ROOT
from trajectory_assets.code_versions import closure, imported_modules
from trajectory_assets.defs.code_versions import COMPUTED_BY, INGEST_ASSETS, asset_code_versions
from trajectory_assets.exports.registry import EXPORTS

EXPORT_ASSETS = {export.asset_name for export in EXPORTS}


@pytest.fixture(scope="module")
def source_tree(tmp_path_factory) -> Path:
    """A copy of the two packages, to edit."""
    root = tmp_path_factory.mktemp("source")
    for package in ("trajectory_assets", "schemas"):
        shutil.copytree(PROJECT_ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def changed_by(root: Path, module: str, config_file: str | None = None) -> set[str]:
    """The assets whose code version changes when ``module`` (a path under ``root``) is edited."""
    before = asset_code_versions(config_file, root=root)
    with edited(root / module):
        after = asset_code_versions(config_file, root=root)
    return {asset for asset in before if before[asset] != after[asset]}


def test_a_change_to_the_report_leaves_the_trajectories_and_exports_as_they_are(source_tree):
    assert changed_by(source_tree, "trajectory_assets/report/page.py") == {"stats_report"}


def test_a_change_to_a_conversion_rule_versions_the_ingest_assets_anew(source_tree):
    changed = changed_by(source_tree, "trajectory_assets/chat/messages.py")
    assert set(INGEST_ASSETS) <= changed and "stats_report" in changed
    # a format's module declares what the exports and the report ask of its rows (where a GRPO
    # task goes, its report section): they ask the registry, which imports every format, and
    # with it every codec the formats read with
    for module in ("sources/hermes.py", "chat/hermes_markup.py", "chat/responses.py"):
        assert changed_by(source_tree, f"trajectory_assets/{module}") == {*INGEST_ASSETS, *EXPORT_ASSETS,
                                                                           "stats_report"}, module



def test_a_change_to_the_decontamination_rules_re_ingests_nothing(source_tree):
    """Ingest stores the flags with the rules' fingerprint and the export steps recompute stale
    ones: the exports and the report are versioned anew, the trajectories stay fresh."""
    assert changed_by(source_tree, "trajectory_assets/ingest/decontamination.py") == {*EXPORT_ASSETS, "stats_report"}
    # what ingest imports besides it still counts: a conversion rule (above), the storage
    assert set(INGEST_ASSETS) <= changed_by(source_tree, "trajectory_assets/io/storage.py")

def test_a_change_to_redaction_versions_the_ingest_assets_only(source_tree):
    """Only ingest redacts: the config's rules are checked by the redactor where it is used,
    so the exports and the report, which read the config, do not import it."""
    assert changed_by(source_tree, "trajectory_assets/redaction/redactor.py") == set(INGEST_ASSETS)
    assert changed_by(source_tree, "trajectory_assets/redaction/secret_rules.py") == set(INGEST_ASSETS)


def test_a_change_to_one_renderer_versions_that_export_and_what_reads_it(source_tree):
    assert changed_by(source_tree, "trajectory_assets/exports/verl.py") == {"verl_dataset", "stats_report"}
    # nemo_rl_sft writes the TRL rows, and nemo_rl_dpo applies NeMo RL's rule kept there
    assert changed_by(source_tree, "trajectory_assets/exports/trl_sft.py") == {
        "trl_sft_dataset", "nemo_rl_sft_dataset", "nemo_rl_dpo_dataset", "stats_report"}


def test_a_change_to_a_contract_versions_the_exports_it_checks(source_tree):
    assert changed_by(source_tree, "schemas/sft_hermes.py") == {"sft_hermes_dataset", "stats_report"}
    # the TRL and NeMo RL preference contracts share the DPO one's rules
    assert changed_by(source_tree, "schemas/dpo.py") == {
        "dpo_dataset", "trl_dpo_dataset", "nemo_rl_dpo_dataset", "trl_sft_dataset", "trl_grpo_dataset",
        "nemo_rl_sft_dataset", "axolotl_dataset", "stats_report"}


def test_the_config_sections_an_asset_reads_are_part_of_its_version(tmp_path):
    default = asset_code_versions(None)
    config = tmp_path / "config.yaml"
    config.write_text("dpo:\n  min_margin: 0.5\n")
    changed = {asset for asset, version in asset_code_versions(str(config)).items() if version != default[asset]}
    assert changed == {export.asset_name for export in EXPORTS if export.family == "dpo"}
    config.write_text("dpo: [not a mapping\n")
    broken = asset_code_versions(str(config))  # a config that does not load fails the runs, not the code location
    assert broken["stats_report"] != default["stats_report"]


def test_every_asset_has_a_version_made_of_the_release_its_code_and_its_config():
    versions = asset_code_versions(None)
    assert set(versions) == {*INGEST_ASSETS, *EXPORT_ASSETS, "stats_report"} == set(COMPUTED_BY)
    assert all(version.startswith("0.") and "+" in version and "." in version.split("+")[1]
               for version in versions.values())


def test_imports_are_read_from_the_source_function_level_ones_included():
    imported = imported_modules(PROJECT_ROOT, "trajectory_assets.cli")
    assert "trajectory_assets.redaction.redactor" in imported  # imported inside a function
    modules = closure(PROJECT_ROOT, ["trajectory_assets.exports.sft"])
    assert "trajectory_assets.exports.families.sft" in modules and "schemas.sft" in modules
    assert "trajectory_assets.exports" in modules  # the package's __init__ runs first
    assert "trajectory_assets.exports.registry" not in modules and "trajectory_assets.report.page" not in modules


def test_imports_are_statements_not_text_that_looks_like_one(tmp_path):
    package = tmp_path / "trajectory_assets"
    package.mkdir()
    for name in ("__init__", "a", "b", "c", "d"):
        (package / f"{name}.py").write_text("")
    (package / "main.py").write_text(
        '"""Docs quoting code:\nfrom trajectory_assets.a import x\n"""\n'
        "import os, trajectory_assets.b as b\n"
        "def f():\n    from trajectory_assets import (\n        c,  # a module of the package\n        d,\n    )\n")
    assert imported_modules(tmp_path, "trajectory_assets.main") == {
        "trajectory_assets", "trajectory_assets.b", "trajectory_assets.c", "trajectory_assets.d"}


def test_a_source_read_before_is_not_parsed_again_and_an_edited_one_is(tmp_path, monkeypatch):
    from trajectory_assets import code_versions

    cache = tmp_path / "cache" / "import_names.json"
    monkeypatch.setattr(code_versions, "IMPORT_NAMES_CACHE", cache)
    monkeypatch.setattr(code_versions, "_known_names", None)  # as a new process starts
    package = tmp_path / "trajectory_assets"
    package.mkdir()
    for name in ("__init__", "a", "b"):
        (package / f"{name}.py").write_text("")
    main = package / "main.py"
    main.write_text("import trajectory_assets.a\n")

    def closure_of_main() -> list[str]:
        return closure(tmp_path, ["trajectory_assets.main"])

    assert closure_of_main() == ["trajectory_assets", "trajectory_assets.a", "trajectory_assets.main"]
    key = hashlib.sha256(main.read_bytes()).hexdigest()
    assert json.loads(cache.read_text())[key] == ["trajectory_assets.a"]  # written once the closure is known
    # the next process takes the names from the cache, by the source's bytes: a cache that
    # says b proves it was not parsed
    cache.write_text(json.dumps({key: ["trajectory_assets.b"]}))
    monkeypatch.setattr(code_versions, "_known_names", None)
    assert closure_of_main() == ["trajectory_assets", "trajectory_assets.b", "trajectory_assets.main"]
    main.write_text("import trajectory_assets.a\nimport os\n")  # an edit: parsed again
    assert closure_of_main() == ["trajectory_assets", "trajectory_assets.a", "trajectory_assets.main"]


def test_a_cache_that_cannot_be_read_or_written_is_parsed_around(tmp_path, monkeypatch):
    from trajectory_assets import code_versions

    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(code_versions, "IMPORT_NAMES_CACHE", blocker / "import_names.json")
    monkeypatch.setattr(code_versions, "_known_names", None)
    assert "trajectory_assets.redaction.redactor" in closure(PROJECT_ROOT, ["trajectory_assets.cli"])
    monkeypatch.setattr(code_versions, "IMPORT_NAMES_CACHE", blocker)  # not JSON
    monkeypatch.setattr(code_versions, "_known_names", None)
    assert "trajectory_assets.redaction.redactor" in closure(PROJECT_ROOT, ["trajectory_assets.cli"])
