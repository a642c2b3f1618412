"""What a test process (:mod:`.child`) collects: only what is on the path to its test. Given one
test's node id, pytest would visit every file of each directory on the way, build every test of the
module, every case of a parametrized test, and keep one."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest


def next_on_path(nodearg: str | None, collector: pytest.Collector) -> str | None:
    """The name ``collector`` must collect to reach the test that ``nodearg`` selects (the
    function's name, less parameters); None where it is not on the test's path."""
    target = _test_path(nodearg)
    if target is None or collector.path != target[0]:
        return None
    wanted = target[1]
    ours = _names_inside(collector.nodeid)
    if len(ours) >= len(wanted) or wanted[: len(ours)] != ours:
        return None
    return wanted[len(ours)].split("[", 1)[0]


def narrow_cases(nodearg: str | None, metafunc: pytest.Metafunc) -> None:
    """Keeps, of the cases generated for ``metafunc``'s function, the one ``nodearg`` selects,
    where it is among them: pytest would build an item for each. Where none matches, all
    stay, and pytest says what it says of a test it cannot find."""
    target = _test_path(nodearg)
    definition = metafunc.definition
    if target is None or definition.path != target[0] or not target[1][-1].endswith("]"):
        return
    name, _, case = target[1][-1][:-1].partition("[")
    if _names_inside(definition.nodeid) != (*target[1][:-1], name):
        return
    calls: list[Any] = metafunc._calls  # pytest's own list of the cases, in every version 8-9
    kept = [call for call in calls if call.id == case]
    if kept:
        calls[:] = kept


def _names_inside(nodeid: str) -> tuple[str, ...]:
    _, _, inside = nodeid.partition("::")
    return tuple(inside.split("::")) if inside else ()


@functools.cache
def _test_path(nodearg: str | None) -> tuple[Path, tuple[str, ...]] | None:
    """``nodearg``'s file and the names inside it, parsed once: pytest asks for every name."""
    if nodearg is None:
        return None
    path, _, inside = nodearg.partition("::")
    return (Path(path), tuple(inside.split("::"))) if inside else None
