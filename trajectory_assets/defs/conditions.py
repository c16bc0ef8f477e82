"""When the datasets refresh by themselves (declarative automation)."""

import dagster as dg

# The datasets are rebuilt when the data they are made from changed: a batch ingested from
# new bytes, or an export rebuilt (the report). Declarative automation's `eager` rebuilds
# them whenever an input is materialized again, even from the same bytes (a batch ingested
# a second time by another machine, a manual re-run): at 100 GB, hours of work that change
# nothing. This is `eager` with "a dependency was updated" narrowed to "a dependency's data
# version changed".
_INPUT_DATA_CHANGED = dg.AutomationCondition.any_deps_match(
    (dg.AutomationCondition.data_version_changed() & ~dg.AutomationCondition.executed_with_root_target())
    | dg.AutomationCondition.will_be_requested()
).with_label("any_deps_data_version_changed")
REBUILD_ON_CHANGED_DATA = (
    dg.AutomationCondition.in_latest_time_window()
    & (dg.AutomationCondition.newly_missing() | _INPUT_DATA_CHANGED).since_last_handled()
    & ~dg.AutomationCondition.any_deps_missing()
    & ~dg.AutomationCondition.any_deps_in_progress()
    & ~dg.AutomationCondition.in_progress()
).with_label("eager on changed data")
