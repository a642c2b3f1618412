"""The table of torch patches and the code agree: every row is used, every patch names a row, and
what is patched at run time is what the rows say."""

from __future__ import annotations

import ast
import importlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch._dynamo.output_graph
import torch._inductor.codecache
import torch._inductor.compile_fx
import torch._inductor.config as inductor_config
import torch._inductor.cudagraph_trees as cgt
import torch._inductor.output_code
import torch.cuda.graphs

from pytest_cudagraph_guard import _torch
from pytest_cudagraph_guard._torch import counting, events, observe, release, trees
from pytest_cudagraph_guard._torch.patch_table import PATCHES
from pytest_cudagraph_guard._torch.patches import applied_rows

PACKAGE = Path(_torch.__file__).parent


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.glob("*.py")):
        yield path.name, ast.parse(path.read_text())


def _row_ids_named(tree: ast.Module) -> set[str]:
    return {
        node.slice.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "PATCHES"
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    }


def _replacements(tree: ast.Module) -> list[str]:
    """Code that replaces an attribute of another object: setattr, ``object.__setattr__``,
    an assignment into ``__dict__`` or to ``__class__``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name in ("setattr", "object.__setattr__"):
                found.append(ast.unparse(node))
        if isinstance(node, ast.Assign):
            for target in node.targets:
                text = ast.unparse(target)
                if ".__dict__[" in text or text.endswith(".__class__"):
                    found.append(text)
    return found


def test_every_row_is_used_by_the_code_and_every_row_named_exists() -> None:
    named = set().union(
        *(_row_ids_named(tree) for name, tree in _modules() if name != "patches.py")
    )
    assert named == set(PATCHES)


def test_only_the_patches_module_replaces_attributes() -> None:
    found = {name: _replacements(tree) for name, tree in _modules() if name != "patches.py"}
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_each_row_is_used_in_the_module_its_id_names() -> None:
    named = {name.removesuffix(".py"): _row_ids_named(tree) for name, tree in _modules()}
    for row in PATCHES.values():
        assert row.id in named[row.id.split(".")[0]], row.id
        assert all(row[1:]), row.id


def _assert_applied_as_the_rows_say(prefix: str) -> None:
    applied = applied_rows()
    wanted = {row_id for row_id in PATCHES if row_id.startswith(prefix)}
    assert wanted <= set(applied)
    for row_id in wanted:
        assert applied[row_id] <= set(PATCHES[row_id].owners()), row_id


def test_observing_patches_what_its_rows_say(monkeypatch: pytest.MonkeyPatch) -> None:
    def observer(event: events.TorchEvent) -> None:
        pass

    monkeypatch.setattr(observe, "shares_callables_across_threads", lambda: True)  # < 2.13
    original = torch._inductor.compile_fx.compile_fx
    observe.start_observing(observer)
    try:
        assert torch._inductor.compile_fx.compile_fx is not original
        _assert_applied_as_the_rows_say("observe.")
        _assert_applied_as_the_rows_say("tree_events.")
    finally:
        observe.stop_observing(observer)
    assert torch._inductor.compile_fx.compile_fx is original


def test_thread_readiness_patches_what_its_rows_say(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(cgt.__dict__, "graph_capture_lock", raising=False)  # as before 2.13
    original = cgt.CUDAGraphTreeManager.__dict__["run_eager"]
    trees.start_thread_readiness()
    try:
        assert cgt.CUDAGraphTreeManager.__dict__["run_eager"] is not original
        _assert_applied_as_the_rows_say("trees.lock_")
        _assert_applied_as_the_rows_say("trees.fx_tracing_check")
    finally:
        trees.stop_thread_readiness()
    assert cgt.CUDAGraphTreeManager.__dict__["run_eager"] is original


def test_counting_swaps_the_classes_its_rows_say() -> None:
    original = type(inductor_config)
    counting.count_changes(inductor_config)
    try:
        _assert_applied_as_the_rows_say("counting.")
    finally:
        counting.stop_counting(inductor_config)
    assert type(inductor_config) is original


def test_a_worker_importing_trees_first_patches_what_its_row_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = cgt.get_obj
    monkeypatch.setitem(cgt.__dict__, "get_obj", original)  # put back afterwards
    monkeypatch.delattr(cgt, "_initialize_tls", raising=False)  # as before 2.13
    monkeypatch.delitem(sys.modules, trees.CUDAGRAPH_TREES)  # a first import...
    monkeypatch.setattr(importlib, "import_module", lambda name: cgt)  # ...of the same module
    worker = threading.Thread(target=trees.import_cudagraph_trees)
    worker.start()
    worker.join()
    assert getattr(cgt.get_obj, "__wrapped__", None) is original
    _assert_applied_as_the_rows_say("trees.get_obj")


def test_tree_managers_run_unwatched_where_each_thread_has_its_own_callable() -> None:
    def observer(event: events.TorchEvent) -> None:
        pass

    original = cgt.CUDAGraphTreeManager.__dict__["run"]
    observe.start_observing(observer)
    try:
        watched = cgt.CUDAGraphTreeManager.__dict__["run"] is not original
        assert watched == (release.release_tuple() < (2, 13))
    finally:
        observe.stop_observing(observer)
