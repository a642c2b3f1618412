"""The ```python examples of the Markdown docs, and what running each one must give.

A comment on the line before a block (blank lines between are allowed) directs it:

- ``<!-- docs-test: skip (REASON) -->``: the block is not run;
- ``<!-- docs-test: conftest -->``: the block is the ``conftest.py`` of the next ``python`` block;
- ``<!-- docs-test: args: OPTION ...; expect: passed=N errors=M ... -->``: run with these pytest
  options and expect these outcome counts; either part may be left out.

Without ``expect``, every test of a block must pass, but a test whose marker carries
``require_cuda=True`` must be skipped where CUDA is not available. A block that defines no test is
a script: it must import cleanly (it runs as a test module with one empty test added).
"""

from __future__ import annotations

import ast
import re
import shlex
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

DIRECTIVE = re.compile(r"^<!--\s*docs-test:\s*(?P<body>.*?)\s*-->$")
SKIP = re.compile(r"^skip\s*\((?P<reason>.+)\)$")
SCRIPT_TEST = "\n\ndef test_example_runs():\n    pass\n"


@dataclass(frozen=True)
class Block:
    """One ```python block: where it is, its code and the directive before it."""

    source: str
    line: int
    code: str
    directive: str = ""


@dataclass
class Example:
    """A block made runnable: the files of its folder, its pytest options, its outcomes."""

    label: str
    files: dict[str, str]
    args: tuple[str, ...] = ()
    expect: dict[str, int] = field(default_factory=dict)


def python_blocks(path: Path, name: str) -> list[Block]:
    """Every ```python block of the Markdown file ``path``, named ``name`` in labels."""
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    directive = ""
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        match = DIRECTIVE.match(line)
        if match:
            directive = match["body"]
        elif line.startswith("```"):
            end = _fence_end(lines, index)
            if line == "```python":
                code = "\n".join(lines[index + 1 : end]) + "\n"
                blocks.append(Block(name, index + 1, code, directive))
            directive = ""
            index = end
        elif line:
            directive = ""
        index += 1
    return blocks


def _fence_end(lines: list[str], start: int) -> int:
    for index in range(start + 1, len(lines)):
        if lines[index].strip() == "```":
            return index
    raise ValueError(f"the block at line {start + 1} is never closed")


def skip_reason(block: Block) -> str | None:
    match = SKIP.match(block.directive)
    return match["reason"].strip() if match else None


def examples(blocks: list[Block], *, cuda: bool) -> list[Example]:
    """The runnable examples of ``blocks``: opted-out ones left out, conftests joined to theirs."""
    found: list[Example] = []
    conftest: str | None = None
    for block in blocks:
        if skip_reason(block) is not None:
            continue
        if block.directive == "conftest":
            conftest = block.code
            continue
        found.append(_example(block, conftest, cuda=cuda))
        conftest = None
    if conftest is not None:
        raise ValueError(f"{blocks[-1].source}: a conftest block with no block after it")
    return found


def _example(block: Block, conftest: str | None, *, cuda: bool) -> Example:
    label = f"{block.source}:{block.line}"
    stem = re.sub(r"\W", "_", Path(block.source).stem)
    module = f"test_{stem}_{block.line}.py"
    args, expect = _parse_directive(block.directive)
    tests = _test_outcomes(block.code, cuda=cuda)
    code = block.code if tests else block.code + SCRIPT_TEST
    files = {module: code}
    if conftest is not None:
        files["conftest.py"] = conftest
    return Example(label, files, args, expect or dict(Counter(tests or ["passed"])))


def _parse_directive(directive: str) -> tuple[tuple[str, ...], dict[str, int]]:
    args: tuple[str, ...] = ()
    expect: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in directive.split(";"))):
        key, _, value = part.partition(":")
        if key == "args":
            args = tuple(shlex.split(value))
        elif key == "expect":
            expect = {k: int(v) for k, v in (item.split("=") for item in value.split())}
        else:
            raise ValueError(f"unknown docs-test directive {part!r}")
    return args, expect


def _test_outcomes(code: str, *, cuda: bool) -> list[str]:
    """The outcome each test function of ``code`` must have: passed, or skipped without CUDA."""
    outcomes = []
    for function in _test_functions(ast.parse(code)):
        needs_cuda = any(_requires_cuda(decorator) for decorator in function.decorator_list)
        outcomes.append("skipped" if needs_cuda and not cuda else "passed")
    return outcomes


def _test_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            functions += [n for n in node.body if isinstance(n, ast.FunctionDef)]
    return [f for f in functions if f.name.startswith("test")]


def _requires_cuda(decorator: ast.expr) -> bool:
    return isinstance(decorator, ast.Call) and any(
        k.arg == "require_cuda" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in decorator.keywords
    )


def outcome_counts(reports: list[object], prefix: str) -> dict[str, int]:
    """The outcome counts, as pytest's summary gives them, of the reports under ``prefix``."""
    counts: Counter[str] = Counter()
    for report in reports:
        if not getattr(report, "nodeid", "").startswith(prefix):
            continue
        counts[_outcome(report)] += 1
    counts.pop("", None)
    return dict(counts)


def _outcome(report: object) -> str:
    when = getattr(report, "when", None)
    outcome = getattr(report, "outcome", "")
    if when is None:  # a collect report
        return "errors" if outcome == "failed" else ""
    if hasattr(report, "wasxfail"):
        return "xfailed" if outcome == "skipped" else "xpassed"
    if outcome == "failed":
        return "failed" if when == "call" else "errors"
    if outcome == "skipped":
        return "skipped"
    return "passed" if when == "call" else ""
