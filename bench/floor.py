"""The floor: read every line of every source once and parse it with the fastest JSON
parser installed (orjson). Nothing can be faster and still look at every record.
Usage: python -m bench.floor SOURCE_DIR"""

import sys
from pathlib import Path

import orjson


def main(source: str) -> None:
    records = 0
    for path in sorted(Path(source).rglob("*.jsonl")):
        with open(path, "rb") as handle:
            for line in handle:
                orjson.loads(line)
                records += 1
    print(records)


if __name__ == "__main__":
    main(sys.argv[1])
