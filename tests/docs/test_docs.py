"""The README and docs/: their Python examples run, and the README keeps its shape."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from .markdown_examples import (
    Example,
    examples,
    outcome_counts,
    python_blocks,
    skip_reason,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
CUDA = torch.cuda.is_available()
README_MAX_LINES = 250
HISTORY = re.compile(
    r"before this (?:release|change)|an earlier version|previously|no longer|until now",
    re.IGNORECASE,
)


def run_examples(pytester: pytest.Pytester, found: list[Example]) -> list[str]:
    """Runs the examples, one pytest session per set of options; returns what went wrong."""
    sessions: dict[tuple[str, ...], list[tuple[int, Example]]] = defaultdict(list)
    for number, example in enumerate(found):
        # A conftest's hooks reach every test of its session: such an example runs alone.
        key = (*example.args, f"#{number}") if "conftest.py" in example.files else example.args
        sessions[key].append((number, example))
    wrong = []
    for session, members in enumerate(sessions.values()):
        folder = pytester.path / f"session{session}"
        for number, example in members:
            case = folder / f"example{number}"
            case.mkdir(parents=True)
            for name, code in example.files.items():
                (case / name).write_text(code)
        recorder = pytester.inline_run(
            str(folder), "--continue-on-collection-errors", *members[0][1].args
        )
        reports = recorder.getreports(("pytest_runtest_logreport", "pytest_collectreport"))
        for number, example in members:
            got = outcome_counts(reports, f"session{session}/example{number}/")
            if got != example.expect:
                wrong.append(f"{example.label}: expected {example.expect}, got {got}")
    return wrong


@pytest.mark.parametrize("doc", DOCS)
def test_the_python_examples_run(ourtester: pytest.Pytester, doc: str) -> None:
    found = examples(python_blocks(ROOT / doc, doc), cuda=CUDA)
    assert run_examples(ourtester, found) == []


def test_a_broken_example_is_reported(ourtester: pytest.Pytester, tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nimport pytest\n\n\n"
        "@pytest.mark.cudagraph_thread(threads=2)\n"
        "def test_threads():\n    assert False\n```\n\n"
        "```python\nimport no_such_module\n```\n\n"
        "```python\nimport pytest\n\n\n"
        "@pytest.mark.cudagraph_thread(require_cuda=True)\n"
        "def test_on_a_gpu():\n    pass\n```\n"
    )
    wrong = run_examples(ourtester, examples(python_blocks(page, "page.md"), cuda=True))
    skipped_without_cuda = "page.md:14: expected {'passed': 1}, got {'skipped': 1}"
    cuda_example_on_a_cpu = [] if CUDA else [skipped_without_cuda]
    assert wrong == [
        "page.md:1: expected {'passed': 1}, got {'failed': 1}",
        "page.md:10: expected {'passed': 1}, got {'errors': 1}",
        *cuda_example_on_a_cpu,
    ]


def test_directives_set_options_outcomes_and_a_conftest(ourtester: pytest.Pytester) -> None:
    page = ourtester.path / "page.md"
    page.write_text(
        "<!-- docs-test: skip (needs a cluster) -->\n```python\nraise SystemExit(1)\n```\n"
        "<!-- docs-test: conftest -->\n```python\nimport pytest\n\n\n"
        "@pytest.fixture\ndef answer():\n    return 42\n```\n"
        "<!-- docs-test: args: --cudagraph-guard=fail; expect: passed=1 errors=1 -->\n"
        "```python\nimport torch._inductor.config as inductor\n\n\n"
        "def test_leaks(answer):\n    assert answer == 42\n"
        "    inductor.triton.cudagraphs = True\n```\n"
    )
    blocks = python_blocks(page, "page.md")
    assert [skip_reason(b) for b in blocks] == ["needs a cluster", None, None]
    found = examples(blocks, cuda=CUDA)
    assert [(sorted(e.files), e.args, e.expect) for e in found] == [
        (
            ["conftest.py", "test_page_15.py"],
            ("--cudagraph-guard=fail",),
            {"passed": 1, "errors": 1},
        )
    ]
    assert run_examples(ourtester, found) == []


def test_opt_outs_are_rare_and_give_a_reason() -> None:
    blocks = [b for doc in DOCS for b in python_blocks(ROOT / doc, doc)]
    skipped = [b for b in blocks if b.directive.startswith("skip")]
    assert all(skip_reason(b) for b in skipped)
    assert len(skipped) * 5 <= len(blocks)


def test_the_readme_is_a_short_guide_that_starts_with_the_two_commands() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES
    commands = [lines[i + 1] for i, line in enumerate(lines) if line == "```sh"][:2]
    assert [c.split(" && ")[0] for c in commands] == ["python3 -m venv .venv"] * 2
    assert "-m pytest --cudagraph-report" in commands[0]
    assert commands[1].endswith('.venv/bin/python -m pytest -n auto -m "not wide"')


def test_ci_runs_the_tests_the_readmes_command_leaves_out() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "-m pytest -n auto -m wide\n" in ci


@pytest.mark.parametrize("doc", DOCS)
def test_the_docs_say_what_is_without_history(doc: str) -> None:
    text = (ROOT / doc).read_text()
    assert HISTORY.findall(text) == []


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_point_at_files_and_headings(doc: str) -> None:
    page = ROOT / doc
    links = re.findall(r"\]\((?!https?://)([^)#\s]*)(?:#([^)\s]+))?\)", page.read_text())
    broken = []
    for target, anchor in links:
        path = (page.parent / target) if target else page
        if not path.exists() or (anchor and anchor not in anchors(path)):
            broken.append(f"{target}#{anchor}")
    assert broken == []
