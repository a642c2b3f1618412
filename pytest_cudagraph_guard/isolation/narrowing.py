"""What a test process collects of its test's module: only the names on the path to its test.
Given one test's node id, pytest would build every test of the module and keep one."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest


def next_on_path(nodearg: str | None, collector: pytest.Collector) -> str | None:
    """The name ``collector`` must collect to reach the test that ``nodearg`` selects (the
    function's name, less parameters); None where it is not on the test's path."""
    target = _test_path(nodearg)
    if target is None or collector.path != target[0]:
        return None
    wanted = target[1]
    _, _, collector_inside = collector.nodeid.partition("::")
    ours = tuple(collector_inside.split("::")) if collector_inside else ()
    if len(ours) >= len(wanted) or wanted[: len(ours)] != ours:
        return None
    return wanted[len(ours)].split("[", 1)[0]


@functools.cache
def _test_path(nodearg: str | None) -> tuple[Path, tuple[str, ...]] | None:
    """``nodearg``'s file and the names inside it, parsed once: pytest asks for every name."""
    if nodearg is None:
        return None
    path, _, inside = nodearg.partition("::")
    return (Path(path), tuple(inside.split("::"))) if inside else None
