"""The README's example output against a real run of its main job: every line the README shows
is in the run's output, in order (process ids and the run's time aside). ``.ci/run`` checks the
main job's output with it; ``tests/docs/test_readme_output.py`` checks that it can fail.

    python -m tests.docs.readme_output OUTPUT   # exit 1, naming each line not found
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ANCHOR = "On a CPU the report reads"
# What differs between two runs of the same code: a test process's id, the session's time.
_PROCESS_ID = re.compile(r"\[subprocess \d+")
_SESSION_TIME = re.compile(r" in [\d.]+s( \([\d:]+\))? =+$")


def readme_example(readme: str) -> list[str]:
    """The lines of the README's example output: the ``text`` block after :data:`ANCHOR`."""
    start = readme.index("```text\n", readme.index(ANCHOR)) + len("```text\n")
    return readme[start : readme.index("```\n", start)].splitlines()


def comparable(line: str) -> str:
    line = _PROCESS_ID.sub("[subprocess N", line.rstrip())
    return _SESSION_TIME.sub(" in", line).strip("= ")


def lines_not_found(example: list[str], output: str) -> list[str]:
    """The example's lines that are not in ``output`` in the example's order."""
    lines = [comparable(line) for line in output.splitlines()]
    missing = []
    position = 0
    for line in example:
        try:
            position = lines.index(comparable(line), position) + 1
        except ValueError:
            missing.append(line)
    return missing


def main(argv: list[str]) -> int:
    (output_path,) = argv
    example = readme_example((ROOT / "README.md").read_text())
    missing = lines_not_found(example, Path(output_path).read_text())
    for line in missing:
        print(f"README example output, not in the main job's output: {line}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
