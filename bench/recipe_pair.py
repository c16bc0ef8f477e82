"""Two copies of the recipe at once, each into its own folder: what the machine's cores
give two busy processes. On a machine whose cores share little, the pair takes as long as
one recipe alone; on this one it does not (docs/performance.md), and a run
that keeps every core busy is bounded by that, not by its CPU seconds alone.
Usage: python -m bench.recipe_pair SOURCE_DIR OUT_DIR"""

import subprocess
import sys
from pathlib import Path


def main(source: str, out: str) -> int:
    copies = [subprocess.Popen([sys.executable, "-m", "bench.recipe", source, str(Path(out) / name)])
              for name in ("a", "b")]
    return max(copy.wait() for copy in copies)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
