"""What a fork server preloads is what a step needs: validating a contract in a forked step
imports no module the server did not (each import would be paid again in every step)."""

import json
import subprocess
import sys

SCRIPT = '''
import json, sys
import pandas as pd
import pandera.errors
from trajectory_assets.runs import step_imports
from schemas.sft import SftSchema

step_imports.import_what_steps_need()
before = set(sys.modules)
try:  # empty object columns fail the dtypes: the failure is checked too
    SftSchema.validate(pd.DataFrame({name: [] for name in SftSchema.to_schema().columns}), lazy=True)
except pandera.errors.SchemaErrors:
    pass
print(json.dumps(sorted(set(sys.modules) - before)))
'''


def test_a_contract_check_imports_nothing_the_preload_did_not():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    new_modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert not [name for name in new_modules if name.startswith(("pandera", "hypothesis"))], new_modules


def test_the_default_redactor_is_built_before_the_fork():
    from trajectory_assets.config import RedactionConfig
    from trajectory_assets.redaction.redactor import Redactor, _redactor
    from trajectory_assets.runs import step_imports

    _redactor.cache_clear()
    step_imports.build_default_redactor()
    assert _redactor.cache_info().currsize == 1
    built = Redactor.from_config(RedactionConfig())
    assert _redactor.cache_info().hits == 1 and Redactor.from_config(RedactionConfig()) is built
