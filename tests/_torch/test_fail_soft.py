"""Fail-soft: a torch internal that is missing or has changed shape, or a bug of ours inside a
torch call, stops only the part of the plugin concerned, with one warning, and never changes the
user's outcomes. One fault per row of the patches table: a new row needs its fault here."""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from pytest_cudagraph_guard._torch import faults, import_hooks, observe
from pytest_cudagraph_guard._torch.patch_table import PATCHES, PatchRow
from pytest_cudagraph_guard._torch.release import torch_version

from ..helpers import records_by_name
from .forked_sessions import ForkedSessions

_HELPERS = """
import importlib.util
import sys

import torch


def after_import(name, change):
    '''Runs change(module) right after module `name` is executed (at once if it was).'''
    if name in sys.modules:
        change(sys.modules[name])
        return

    class Finder:
        def find_spec(self, fullname, path=None, target=None):
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(fullname)
            exec_module = spec.loader.exec_module

            def exec_then_change(module):
                exec_module(module)
                change(module)

            spec.loader.exec_module = exec_then_change
            return spec

    sys.meta_path.insert(0, Finder())


def delete(owner, name):
    def change(module):
        target = module
        for part in owner.split("."):
            target = getattr(target, part) if part else target
        delattr(target, name)

    return change


def refuse_subclasses(cls):
    def refuse(sub, **kwargs):
        raise TypeError(f"{cls.__name__} cannot be subclassed here")

    cls.__init_subclass__ = classmethod(refuse)


def as_before_2_13(module):
    for name in ("graph_capture_lock", "_initialize_tls"):
        module.__dict__.pop(name, None)


TREES = "torch._inductor.cudagraph_trees"
"""

_SUITE = """
import threading

import pytest
import torch
import torch._inductor.config as ic

from pytest_cudagraph_guard import ensure_cudagraph_tls


# On torch 2.9 to 2.11, dynamo can crash compiling one function in two threads at once (a bug):
# each thread makes its first call in turn, as docs/troubleshooting.md says.
FIRST_CALLS = threading.Lock()


def step(x):
    return torch.sin(x) * 2 + torch.cos(x)


def test_a_worker_imports_trees_first():
    errors = []

    def worker():
        try:
            ensure_cudagraph_tls()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert errors == []


def test_compiles():
    torch.compile(step, mode="reduce-overhead")(torch.ones(8))


@pytest.mark.cudagraph_thread(threads=2, tls="init")
def test_threads():
    with FIRST_CALLS:
        torch.compile(step, backend="eager")(torch.ones(8))


def test_leaks():
    ic.max_autotune = True


def test_sees_it_restored():
    assert ic.max_autotune is False
"""

SUITE_TESTS = 5


class Fault(NamedTuple):
    """What the inner conftest does to torch (``target``: what it changes), and the tests that
    this breaks in torch itself (they fail with or without the plugin)."""

    target: str
    change: str
    breaks: tuple[str, ...] = ()
    applies: Callable[[], bool] = lambda: True  # whether this torch has the patch point at all
    stops: tuple[str, ...] = ()  # parts of the plugin that stop, noted as its internal errors


_TREES_AS_BEFORE = "after_import(TREES, as_before_2_13)\n"
_GRAPH_TO_BASE = """
def graph_to_base(module):
    base = module.CompiledFxGraph
    module.CompiledFxGraph = type("CompiledFxGraph", (base,), {"__module__": base.__module__})

after_import("torch._inductor.output_code", graph_to_base)
"""
_CALL_TO_BASE = """
def call_to_base(module):
    base = module.CompiledFxGraph
    own = {name: base.__dict__[name] for name in ("__init__", "post_compile")}
    own["__module__"] = base.__module__
    module.CompiledFxGraph = type("CompiledFxGraph", (base,), own)

after_import("torch._inductor.output_code", call_to_base)
"""

FAULTS = {
    "counting.config_module_class": Fault(
        "_ConfigModule subclasses",
        "import torch._inductor.config as ic\nrefuse_subclasses(type(ic))\n",
    ),
    "counting.config_entry_class": Fault(
        "_ConfigEntry subclasses",
        "after_import('torch.utils._config_module', lambda m: refuse_subclasses(m._ConfigEntry))\n",
    ),
    "trees.get_obj": Fault(  # the marker's threads release their trees through torch's get_obj
        "cudagraph_trees.get_obj",
        _TREES_AS_BEFORE + "after_import(TREES, delete('', 'get_obj'))\n",
        stops=("each thread's CUDAGraph Trees state freed",),
    ),
    "trees.lock_manager_init": Fault(
        "CUDAGraphTreeManager.__init__",
        _TREES_AS_BEFORE + "after_import(TREES, delete('CUDAGraphTreeManager', '__init__'))\n",
    ),
    "trees.lock_run_eager": Fault(
        "CUDAGraphTreeManager.run_eager",
        _TREES_AS_BEFORE + "after_import(TREES, delete('CUDAGraphTreeManager', 'run_eager'))\n",
    ),
    "trees.lock_record_function": Fault(
        "CUDAGraphTreeManager.record_function",
        _TREES_AS_BEFORE
        + "after_import(TREES, delete('CUDAGraphTreeManager', 'record_function'))\n",
    ),
    "trees.fx_tracing_check": Fault(
        "is_fx_symbolic_tracing",
        "after_import('torch.fx._symbolic_trace', delete('', 'is_fx_symbolic_tracing'))\n",
        breaks=("test_compiles", "test_threads"),
    ),
    "observe.compile_fx": Fault(
        "compile_fx.compile_fx",
        "after_import('torch._inductor.compile_fx', delete('', 'compile_fx'))\n",
        breaks=("test_compiles",),
    ),
    "observe.cudagraphify": Fault(
        "compile_fx.cudagraphify",
        "after_import('torch._inductor.compile_fx', delete('', 'cudagraphify'))\n",
    ),
    "observe.graph_init": Fault("CompiledFxGraph", _GRAPH_TO_BASE),
    "observe.graph_post_compile": Fault("CompiledFxGraph", _GRAPH_TO_BASE),
    "observe.manager_init": Fault(
        "CUDAGraphTreeManager.__init__",
        "after_import(TREES, delete('CUDAGraphTreeManager', '__init__'))\n",
    ),
    "observe.backend": Fault(
        "OutputGraph",
        "after_import('torch._dynamo.output_graph', lambda m: setattr(m, 'OutputGraph', "
        "type('OutputGraph', (m.OutputGraph,), {'__module__': m.OutputGraph.__module__})))\n",
    ),
    "observe.manager_run": Fault(
        "CUDAGraphTreeManager.run",
        "after_import(TREES, delete('CUDAGraphTreeManager', 'run'))\n",
        applies=observe.shares_callables_across_threads,
    ),
    "observe.capture_end": Fault(
        "CUDAGraph.capture_end", "delattr(torch.cuda.graphs.CUDAGraph, 'capture_end')\n"
    ),
    "observe.replay": Fault("CUDAGraph.replay", "delattr(torch.cuda.graphs.CUDAGraph, 'replay')\n"),
    "observe.graph_call": Fault("CompiledFxGraph", _CALL_TO_BASE),
    "tree_events.record_function": Fault(
        "CUDAGraphTreeManager.record_function",
        "after_import(TREES, delete('CUDAGraphTreeManager', 'record_function'))\n",
    ),
    "tree_events.check_invariants": Fault(
        "CUDAGraphNode.check_invariants",
        "after_import(TREES, delete('CUDAGraphNode', 'check_invariants'))\n",
    ),
    "tree_events.node_run": Fault(
        "CUDAGraphNode.run", "after_import(TREES, delete('CUDAGraphNode', 'run'))\n"
    ),
    "tree_events.cudagraphify": Fault(
        "cudagraph_trees.cudagraphify", "after_import(TREES, delete('', 'cudagraphify'))\n"
    ),
    "tree_events.runtime_skip": Fault(
        "log_cudagraph_skip_and_bump_counter",
        "after_import(TREES, delete('', 'log_cudagraph_skip_and_bump_counter'))\n",
    ),
    "tree_events.checkpoint": Fault(
        "apply_checkpoint_execution_state_in_allocator",
        "after_import(TREES, delete('CUDAGraphTreeManager', "
        "'apply_checkpoint_execution_state_in_allocator'))\n",
    ),
    "tree_events.fast_path_warning": Fault(
        "check_warn_on_unable_to_start_executing",
        "after_import(TREES, delete('CUDAGraphTreeManager', "
        "'check_warn_on_unable_to_start_executing'))\n",
    ),
}


def _missing_warnings(output: str, row: PatchRow) -> list[str]:
    wanted = f"cudagraph_guard {row.loss.feature}: {row.loss.loses} unavailable on torch"
    return [line for line in output.splitlines() if wanted in line]


def _assert_the_rest_of_the_report(records: dict[str, Any], rows: list[str]) -> None:
    assert {"test_compiles", "test_threads"} <= set(records)
    if any("test_compiles" in FAULTS[row].breaks for row in rows):
        return
    compiled = records["test_compiles"]
    assert compiled["settings"]["triton.cudagraphs"]["value"] is True
    if "observe.compile_fx" not in rows:
        assert len(compiled["activity"]["compiled"]) == 1
    if all(PATCHES[row].loss != PATCHES["observe.graph_init"].loss for row in rows):
        assert len(compiled["activity"]["skips"]) == 1


# Rows whose loss changes what the report's checks count (compiles, skips) for every test.
_COUNTED = ("observe.compile_fx", "observe.graph_init")


def _alone(row: str) -> bool:
    """A row without a fault, a fault that breaks a test, one that makes the trees module look
    older than it is (which changes what the plugin patches), or one whose loss changes what
    the report's checks count: a session of its own."""
    fault = FAULTS.get(row)
    if fault is None or fault.breaks or fault.change.startswith(_TREES_AS_BEFORE):
        return True
    return any(PATCHES[row].loss == PATCHES[counted].loss for counted in _COUNTED)


def _conflict(row: str, other: str) -> bool:
    """Two faults that cannot share a session: they change the same thing in torch, or the
    plugin would warn of both in the same words."""
    return FAULTS[row].target == FAULTS[other].target or PATCHES[row].loss == PATCHES[other].loss


def fault_sessions() -> list[list[str]]:
    """Every row, in as few sessions as their faults allow: each fault in a shared session
    changes what no other there changes and is warned of in its own words, so each shows what
    it turns off as it would alone."""
    sessions: list[list[str]] = []
    for row in sorted(PATCHES):
        shared = (
            rows
            for rows in sessions
            if not any(_alone(other) or _conflict(row, other) for other in rows)
        )
        rows = None if _alone(row) else next(shared, None)
        if rows is None:
            sessions.append([row])
        else:
            rows.append(row)
    return sessions


def _fault_session(rows: list[str], largest: list[str]) -> Any:
    """The largest session (the rows that share one) runs in the README's tests; each other
    shows the same again for its own parts (wide: see tests/conftest.py)."""
    marks = () if rows is largest else pytest.mark.wide
    return pytest.param(rows, id="+".join(rows), marks=marks)


FAULT_SESSIONS = fault_sessions()


@pytest.mark.parametrize(
    "rows", [_fault_session(rows, max(FAULT_SESSIONS, key=len)) for rows in FAULT_SESSIONS]
)
def test_a_missing_torch_internal_turns_off_only_its_part(
    ourtester: pytest.Pytester, forked_sessions: ForkedSessions, rows: list[str]
) -> None:
    for row_id in rows:
        assert row_id in FAULTS, f"add a fault for the new row {row_id} to FAULTS"
    rows = [row_id for row_id in rows if FAULTS[row_id].applies()]
    if not rows:
        pytest.skip(f"torch {torch_version()}: none of these is patched on this torch")
    faults = [FAULTS[row_id] for row_id in rows]
    ourtester.makeconftest(textwrap.dedent(_HELPERS) + "".join(f.change for f in faults))
    ourtester.makepyfile(test_suite=_SUITE)
    result = forked_sessions.run(
        ourtester, "-p", "no:cacheprovider", "-rA", "--cudagraph-report=json:r.json"
    )
    output = result.stdout.str()
    breaks = sorted({name for fault in faults for name in fault.breaks})
    result.assert_outcomes(passed=SUITE_TESTS - len(breaks), failed=len(breaks), warnings=None)
    for name in breaks:
        result.stdout.fnmatch_lines([f"FAILED test_suite.py::{name}*"])
    for row_id in rows:
        assert len(_missing_warnings(output, PATCHES[row_id])) == 1, f"{row_id}:\n{output}"
    stops = [loses for fault in faults for loses in fault.stops]
    assert output.count("internal error") == len(stops), output
    for loses in stops:
        assert f"turned off for this session: {loses}." in output
    result.stdout.fnmatch_lines(["*CudagraphConfigLeakWarning: test_suite.py::test_leaks leaked*"])
    _assert_the_rest_of_the_report(records_by_name(ourtester.path / "r.json"), rows)


def test_the_fault_sessions_hold_each_row_once_and_no_two_that_conflict() -> None:
    sessions = fault_sessions()
    assert sorted(row for rows in sessions for row in rows) == sorted(PATCHES)
    for rows in sessions:
        pairs = [(row, other) for row in rows for other in rows if other != row]
        assert not any(_alone(row) or _conflict(row, other) for row, other in pairs)


def test_every_fault_names_a_row() -> None:
    assert set(FAULTS) == set(PATCHES)


@pytest.mark.wide
def test_a_bug_of_ours_in_an_observer_never_reaches_the_users_compile(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(config_patches: object) -> dict[str, Any]:
        raise ZeroDivisionError("a bug of ours")

    monkeypatch.setattr(observe, "options_of", broken)
    ourtester.makepyfile(
        """
        import torch

        def step(x):
            return torch.sin(x) * 2 + torch.cos(x)

        def test_first():
            assert torch.compile(step, mode="reduce-overhead")(torch.ones(8)).shape == (8,)

        def test_second():
            torch._dynamo.reset()
            assert torch.compile(step, mode="reduce-overhead")(torch.ones(4)).shape == (4,)
        """
    )
    result = ourtester.runpytest("--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*CudagraphGuardWarning: cudagraph_guard internal error in --cudagraph-report *"
            "turned off for this session: compile counts and their options. *",
            "*Traceback (most recent call last):*",
            "*ZeroDivisionError: a bug of ours*",
        ]
    )
    records = records_by_name(ourtester.path / "r.json")
    assert [len(records[name]["activity"]["skips"]) for name in ("test_first", "test_second")] == [
        1,
        1,
    ]
    assert records["test_first"]["activity"]["compiled"] == []


def test_an_action_that_fails_after_an_import_never_fails_the_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "stand_in_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "stand_in_module", raising=False)
    faults.begin_fault_session()
    loss = faults.Loss("a feature", "what it adds")

    def broken() -> None:
        raise KeyError("renamed in a new release")

    assert import_hooks.run_after_import("stand_in_module", broken, loss)
    import stand_in_module  # type: ignore[import-not-found]

    assert stand_in_module.VALUE == 1
    (notice,) = faults.take_notices()
    assert notice.startswith("cudagraph_guard internal error in a feature (torch ")
    assert re.search(r"KeyError: 'renamed in a new release'\n$", notice)
    monkeypatch.delitem(sys.modules, "stand_in_module")
