"""The check of the README's example output (:mod:`.readme_output`, run by ``.ci/run`` on the
main job's output) finds a figure that changed, and only that."""

from __future__ import annotations

import re
from pathlib import Path

from .readme_output import ROOT, lines_not_found, readme_example

EXAMPLE = readme_example((ROOT / "README.md").read_text())


def a_run_as_the_readme_shows_it() -> str:
    """The README's lines as a run prints them: other lines between, other process ids, another
    session time."""
    lines = []
    for line in EXAMPLE:
        lines += ["tests/test_other.py::test_x  passed  [main]", line]
    output = "\n".join(lines).replace("[subprocess 3484]", "[subprocess 91]")
    return re.sub(r" in [\d.]+s ", " in 9.50s (0:00:09) ", output)


def test_a_run_as_the_readme_shows_it_matches() -> None:
    assert lines_not_found(EXAMPLE, a_run_as_the_readme_shows_it()) == []


def test_a_changed_figure_is_named() -> None:
    summary = next(line for line in EXAMPLE if line.startswith("torch: "))
    changed = summary.replace("compiled (inductor ", "compiled (inductor 1")
    output = a_run_as_the_readme_shows_it().replace(summary, changed)
    assert lines_not_found(EXAMPLE, output) == [summary]


def test_lines_out_of_order_are_named() -> None:
    *before, last = a_run_as_the_readme_shows_it().splitlines()
    output = "\n".join([last, *before])  # the session's last line first
    assert lines_not_found(EXAMPLE, output) == [EXAMPLE[-1]]


def test_the_readme_names_the_file_ci_checks() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "tests.docs.readme_output" in ci
    assert Path(ROOT / "tests" / "docs" / "readme_output.py").is_file()
