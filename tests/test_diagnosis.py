"""diagnose(), ensure_cudagraph_tls() and the pytest_cudagraph_diagnose hook, on real objects."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch._inductor.cudagraph_trees as cgt

import pytest_cudagraph_guard as g

from .helpers import LEGACY_GET_OBJ

# The messages torch raises for cudaErrorStreamCaptureUnsupported (900) and
# cudaErrorStreamCaptureInvalidated (901), as seen on the H200 with torch 2.11.
CAPTURE_UNSUPPORTED = (
    "CUDA error: operation not permitted when stream is capturing\n"
    "Search for `cudaErrorStreamCaptureUnsupported' in "
    "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information."
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect."
)
CAPTURE_INVALIDATED = "CUDA error: operation failed due to a previous error during capture"


def raised_in_thread(action: Callable[[], Any]) -> BaseException:
    box: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=run, name="drafter-1")
    thread.start()
    thread.join()
    assert box, "the action did not raise"
    return box[0]


@pytest.fixture
def legacy_get_obj() -> Iterator[None]:
    saved = cgt.__dict__["get_obj"]
    exec(compile(LEGACY_GET_OBJ, cgt.__file__, "exec"), cgt.__dict__)
    yield
    cgt.get_obj = saved


@pytest.mark.parametrize("message", [CAPTURE_UNSUPPORTED, CAPTURE_INVALIDATED])
@pytest.mark.parametrize("kind", [torch.AcceleratorError, RuntimeError])
def test_capture_conflicts(kind: type[RuntimeError], message: str) -> None:
    found = g.diagnose(kind(message), "drafter-1")
    assert found is not None
    assert found.kind == "capture-conflict"
    assert "graph_capture_lock" in found.hint


@pytest.mark.usefixtures("legacy_get_obj")
def test_missing_thread_state_from_the_real_get_obj_frames() -> None:
    exc = raised_in_thread(lambda: cgt.get_container(0))
    assert type(exc) is AssertionError
    assert str(exc) == ""
    found = g.diagnose(exc, "drafter-1")
    # By its fields: pytester's in-process sessions may have this worker import the module again.
    assert found is not None
    assert found.kind == "tls-missing"
    assert "ensure_cudagraph_tls()" in found.hint
    assert "#184357" in found.hint
    assert "TORCHINDUCTOR_CUDAGRAPH_TREES" not in found.hint


def test_a_bare_assertion_elsewhere_is_not_tls_missing() -> None:
    def fails() -> None:
        raise AssertionError

    found = g.diagnose(raised_in_thread(fails), "drafter-1")
    assert found is not None
    assert found.kind == "thread-error"


def test_broken_thread_local_objects() -> None:
    exc = raised_in_thread(lambda: torch._C._get_obj_in_tls("tree_manager_containers"))
    assert "py_objects.obj_dict_.count(key)" in str(exc)
    found = g.diagnose(exc, "drafter-1")
    assert found is not None
    assert found.kind == "tls-corrupt"


def test_causes_are_followed() -> None:
    try:
        try:
            raise torch.AcceleratorError(CAPTURE_UNSUPPORTED)
        except RuntimeError as inner:
            raise ValueError("step failed") from inner
    except ValueError as outer:
        found = g.diagnose(outer)
    assert found is not None
    assert found.kind == "capture-conflict"


def test_other_errors_are_thread_errors_outside_the_main_thread_only() -> None:
    error = KeyError("missing")
    found = g.diagnose(error, "drafter-1")
    assert found is not None
    assert found.kind == "thread-error"
    assert "'drafter-1'" in found.hint
    assert g.diagnose(error) is None
    assert g.diagnose(error, threading.main_thread().name) is None


NESTED_FX_TRACE = (
    "Detected that you are using FX to symbolically trace a dynamo-optimized function. "
    "This is not supported at the moment."
)


@pytest.mark.parametrize("per_thread", [False, True])
def test_the_nested_fx_tracing_hint_names_what_this_torch_does(
    per_thread: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracing = importlib.import_module("torch.fx._symbolic_trace")
    if per_thread:
        monkeypatch.setattr(tracing, "_is_fx_tracing_tls", threading.local(), raising=False)
    else:
        monkeypatch.delattr(tracing, "_is_fx_tracing_tls", raising=False)
    found = g.diagnose(RuntimeError(NESTED_FX_TRACE), "drafter-1")
    assert found is not None
    assert found.kind == "thread-error"
    assert ("keeps that flag per thread" in found.hint) is per_thread
    assert ("process-wide" in found.hint) is not per_thread


@pytest.mark.usefixtures("legacy_get_obj")
def test_ensure_cudagraph_tls_readies_a_fresh_thread_once() -> None:
    results: list[object] = []

    def drafter() -> None:
        results.append(g.ensure_cudagraph_tls())
        results.append(g.ensure_cudagraph_tls())
        results.append(cgt.get_container(0).device_index)

    thread = threading.Thread(target=drafter)
    thread.start()
    thread.join()
    assert results == [True, False, 0]
    assert g.ensure_cudagraph_tls() is False  # the main thread has it from the import


@pytest.mark.processes
def test_ensure_cudagraph_tls_when_trees_are_first_imported_in_a_worker() -> None:
    """The module's own state goes to the importing thread; on torch < 2.13 (reproduced here
    by an import hook that installs 2.12's get_obj as the module loads) the main thread must
    still get its state when it first needs it."""
    script = textwrap.dedent(
        """
        import importlib.util, sys, threading
        import torch
        import pytest_cudagraph_guard as g

        LEGACY_GET_OBJ = %r
        NAME = "torch._inductor.cudagraph_trees"

        class TorchBefore213:
            def find_spec(self, name, path, target=None):
                if name != NAME:
                    return None
                sys.meta_path.remove(self)
                spec = importlib.util.find_spec(name)
                load = spec.loader.exec_module

                def exec_module(module):
                    load(module)
                    exec(compile(LEGACY_GET_OBJ, module.__file__, "exec"), module.__dict__)
                    module.__dict__.pop("_initialize_tls", None)
                    module.__dict__.pop("graph_capture_lock", None)

                spec.loader.exec_module = exec_module
                return spec

        assert NAME not in sys.modules
        sys.meta_path.insert(0, TorchBefore213())
        results = []

        def drafter():
            results.append(g.ensure_cudagraph_tls())
            import torch._inductor.cudagraph_trees as cgt
            results.append(cgt.get_container(0).device_index)

        thread = threading.Thread(target=drafter)
        thread.start()
        thread.join()
        import torch._inductor.cudagraph_trees as cgt
        assert not hasattr(cgt, "_initialize_tls")
        print(results, cgt.get_container(0).device_index, g.ensure_cudagraph_tls(), flush=True)
        # torch's inductor machinery sometimes aborts at interpreter exit under load
        # ("terminate called without an active exception"); what is checked is printed above.
        import os
        os._exit(0)
        """
    ) % (LEGACY_GET_OBJ,)
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[False, 0] 0 False"


def test_plugins_can_name_other_errors(ourtester: pytest.Pytester) -> None:
    ourtester.makeconftest(
        """
        import pytest_cudagraph_guard as g

        def pytest_cudagraph_diagnose(exc, thread_name):
            if isinstance(exc, MemoryError):
                return g.Diagnosis("host-oom", f"{thread_name} ran out of host memory")
        """
    )
    ourtester.makepyfile(
        """
        import pytest

        @pytest.mark.cudagraph_thread(threads=1)
        def test_oom():
            raise MemoryError("pinned buffer")
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*[[]cudagraph-thread-0] raised this",
            "*kind: host-oom",
            "*hint: cudagraph-thread-0 ran out of host memory",
        ]
    )


def test_errors_of_the_tests_own_threads_are_recorded_and_pytest_still_warns(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(
        """
        def pytest_cudagraph_record(item, record):
            for error in record["errors"]:
                print("RECORDED", error["thread"], error["type"], error["kind"])
        """
    )
    ourtester.makepyfile(
        """
        import threading
        import torch

        def test_own_thread():
            def drafter():
                raise torch.AcceleratorError(
                    "CUDA error: operation failed due to a previous error during capture"
                )
            thread = threading.Thread(target=drafter, name="drafter-0")
            thread.start()
            thread.join()
        """
    )
    result = ourtester.runpytest("-s", "--cudagraph-report=json:report.json")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*RECORDED drafter-0 torch.AcceleratorError capture-conflict",
            "*PytestUnhandledThreadExceptionWarning*drafter-0*",
        ]
    )
