"""What a fork server imports before it forks steps (and, in the CLI, ingest runs) when it is
started as a new interpreter: the code location and the instance's storage modules
(``step_imports.import_what_steps_need``), then ``gc.freeze()`` of every object those imports
made. A forked process then pays only for its own work. (A server forked from the CLI,
``processes.fork_server_from_here``, has all of this from the CLI, and freezes the same way.)

- Arrow's allocator is told how long to keep freed memory (``step_imports.set_arrow_purge_delay``):
  it reads that when pyarrow loads, so before the import.
- The forked processes share the server's pages until they write to them. A full garbage
  collection writes to the header of every object it walks, so in a step it would walk
  everything the server imported and make the kernel copy every page holding such an
  object; frozen objects (the modules, classes and functions, which live as long as the
  process anyway) are never walked. Measured on a DPO step of the 1 GB benchmark corpus:
  36 MiB less private memory.
"""

import gc
import signal

from trajectory_assets.runs.step_imports import import_what_steps_need, set_arrow_purge_delay

set_arrow_purge_delay()
import_what_steps_need()
# the CLI blocks SIGINT in its threads and takes it in one of them (processes.Interrupts),
# and its fork server inherits the block: a forked step must still take the SIGINT with
# which Dagster stops it
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
gc.freeze()
