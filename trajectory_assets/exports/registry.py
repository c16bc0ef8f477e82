"""Every export: the concatenation of the export modules' ``EXPORT``, in the order the
definitions, the CLI, the report and the README list them.

Adding an export is one module in ``exports/`` (its renderer, Arrow schema, lineage, field
descriptions and ``read_back``; see ``export.py``), its contract in ``schemas/``, and one
line here. Everything else derives from :data:`EXPORTS`: the Dagster assets and their
checks (``defs/exports.py``), the CLI's ``--exports`` choices, the report's viewer, the
README's export table (checked by a test) and the definitions snapshot.

>>> [export.name for export in EXPORTS if export.family == "dpo"]
['dpo', 'trl_dpo', 'nemo_rl_dpo']
>>> EXPORTS_BY_NAME["trl_sft"].asset_name
'trl_sft_dataset'
"""

from __future__ import annotations

from trajectory_assets.exports import (
    axolotl,
    dpo,
    grpo,
    llama_factory,
    nemo_rl_dpo,
    nemo_rl_sft,
    on_policy_tokens,
    sft,
    sft_hermes,
    trl_dpo,
    trl_grpo,
    trl_sft,
    verl,
)
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.families import FAMILIES

EXPORTS: tuple[Export, ...] = (
    sft.EXPORT,
    dpo.EXPORT,
    sft_hermes.EXPORT,
    grpo.EXPORT,
    trl_sft.EXPORT,
    trl_dpo.EXPORT,
    trl_grpo.EXPORT,
    verl.EXPORT,
    llama_factory.EXPORT,
    nemo_rl_sft.EXPORT,
    nemo_rl_dpo.EXPORT,
    on_policy_tokens.EXPORT,
    axolotl.EXPORT,
)
EXPORTS_BY_NAME: dict[str, Export] = {export.name: export for export in EXPORTS}
EXPORT_FAMILIES: tuple[str, ...] = tuple(FAMILIES)


def family_exports(family: str) -> list[Export]:
    return [export for export in EXPORTS if export.family == family]


def markdown_table() -> str:
    """The README's table of exports (a test keeps the README equal to it)."""
    lines = ["| asset | family | files in `exports/<export>/` | fields | what it is |", "|---|---|---|---|---|"]
    for export in EXPORTS:
        extra = "".join(f", `{name}`" for name in (export.index_files(export.name) if export.index_files else {}))
        fields = ", ".join(f"`{name}`" for name in export.arrow_schema.names)
        lines.append(f"| `{export.asset_name}` | {export.family} | `{{train,validation}}-*.{export.file_format}`{extra} "
                     f"| {fields} | {export.description} |")
    return "\n".join(lines)
