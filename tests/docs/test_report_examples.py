"""docs/report.md's examples of the terminal and Markdown reports are what a real run of its own
``test_pipeline.py`` prints and writes on the development machine (torch >= 2.12, no GPU), so
they cannot drift from the report."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from pytest_cudagraph_guard._torch.cudagraph_settings import config_is_process_wide

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "report.md"
SUMMARY_RULE = "-" * 35 + " summary " + "-" * 36

pytestmark = pytest.mark.skipif(
    config_is_process_wide() or torch.cuda.is_available(),
    reason="the examples show a run on torch >= 2.12 without a GPU",
)


def block_after(text: str, anchor: str, fence: str) -> str:
    """The first ``fence`` block after ``anchor``, without its fences."""
    start = text.index(fence + "\n", text.index(anchor)) + len(fence) + 1
    return text[start : text.index("```\n", start)]


def section(output: str) -> list[str]:
    """The cudagraph report's lines, less the lines naming the files written."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "= cudagraph report =" in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("=="))
    return [line for line in lines[start:end] if not line.startswith("cudagraph report: ")]


def without_versions(markdown: str) -> list[str]:
    """The Markdown page less its versions row (the machine's Python, torch and GPUs)."""
    lines = markdown.splitlines()
    row = lines.index("| --- | --- | --- | --- | --- | --- |") + 1
    return lines[:row] + lines[row + 1 :]


def test_the_terminal_and_markdown_examples_are_a_real_run(ourtester: pytest.Pytester) -> None:
    page = PAGE.read_text()
    ourtester.makepyfile(test_pipeline=block_after(page, "## `term`", "```python"))
    result = ourtester.runpytest("--cudagraph-report", "--cudagraph-report=md:r.md")
    result.assert_outcomes(passed=2)
    term = block_after(page, "`pytest test_pipeline.py --cudagraph-report` on", "```text")
    assert section(result.stdout.str()) == term.splitlines()
    markdown = block_after(page, "ready for a CI job summary", "```markdown")
    assert without_versions((ourtester.path / "r.md").read_text()) == without_versions(markdown)
    everything = ourtester.runpytest("--cudagraph-report=term-all")
    term_all = block_after(page, "`--cudagraph-report=term-all` shows every test", "```text")
    shown = section(everything.stdout.str())
    expected = [*shown[: shown.index(SUMMARY_RULE) + 1], "..."]
    assert any_release(expected) == any_release(term_all.splitlines())


def any_release(lines: list[str]) -> list[str]:
    """``lines`` less how many settings keys this torch release has (2.14 adds two)."""
    return [re.sub(r"\b\d+ more at\b", "N more at", line) for line in lines]
