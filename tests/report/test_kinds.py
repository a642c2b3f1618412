"""torch's CUDA-graph failures named (overwritten-output, pool-leak) from torch's own messages,
and the findings torch's tree managers give (rerecord, slow-path), one entry per thread, function
and reason with the count."""

from __future__ import annotations

import inspect
import threading
from collections import defaultdict
from typing import Any

import pytest
import torch
import torch._inductor.cudagraph_trees as cgt

from pytest_cudagraph_guard import diagnose
from pytest_cudagraph_guard._torch import observe, tree_events
from pytest_cudagraph_guard._torch.events import RecordingStarted, Rerecorded, Skipped, TorchEvent
from pytest_cudagraph_guard._torch.patches import Patches
from pytest_cudagraph_guard.core.kinds import (
    OVERWRITTEN_OUTPUT,
    POOL_LEAK,
    RERECORD,
    SLOW_PATH,
)
from pytest_cudagraph_guard.crash.activity_journal import journal_action
from pytest_cudagraph_guard.diagnosis import error_record
from pytest_cudagraph_guard.report import activity as report_activity

STACK = 'File "/src/model.py", line 7, in step\n    return x.sin()\n'


def _raised(message: str) -> RuntimeError:
    try:
        raise RuntimeError(message)
    except RuntimeError as exc:
        return exc


def test_an_overwritten_output_is_named_with_what_to_do() -> None:
    """The message torch sets on a graph output's storage when a later run reuses it."""
    message = cgt.CUDAGraphTreeManager.format_dealloc_msg(STACK)
    found = diagnose(_raised(message))
    assert found is not None
    assert found.kind == OVERWRITTEN_OUTPUT
    assert "torch.compiler.cudagraph_mark_step_begin()" in found.hint
    assert "clone" in found.hint
    cloning = "triton.cudagraph_trees_generation_cloning"
    assert (cloning in found.hint) == (cloning in torch._inductor.config.get_config_copy())


def test_an_overwritten_gradient_is_named_as_such() -> None:
    if (
        "is_grad_output"
        not in inspect.signature(cgt.CUDAGraphTreeManager.format_dealloc_msg).parameters
    ):
        pytest.skip(f"torch {torch.__version__} words no gradient output apart")
    message = cgt.CUDAGraphTreeManager.format_dealloc_msg(STACK, is_grad_output=True)
    found = diagnose(_raised(message))
    assert found is not None
    assert found.kind == OVERWRITTEN_OUTPUT
    assert ".grad" in found.hint


def test_a_tensor_left_in_the_pool_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's own check_memory_pool, with the allocator's CUDA-only answers given as the GPU
    gives them for one live block that no output tracks."""
    monkeypatch.setattr(torch._C, "_cuda_checkPoolLiveAllocations", lambda *a: False, raising=False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    block = {"state": "active_allocated", "size": 512, "frames": []}
    monkeypatch.setattr(
        cgt, "get_cudagraph_segments", lambda pool: [{"address": 4096, "blocks": [block]}]
    )
    with pytest.raises(RuntimeError) as raised:
        cgt.check_memory_pool(0, (0, 1), [])
    record = error_record(raised.value, threading.current_thread().name)
    assert record.kind == POOL_LEAK, record
    assert "no output torch tracks" in (record.hint or "")


def test_other_runtime_errors_stay_unclassified() -> None:
    assert diagnose(_raised("CUDA out of memory")) is None


# --- findings ---------------------------------------------------------------------------------


class _StandInNode:
    """What the observers read of a recorded graph (CUDAGraphNode): its check answers with
    torch's own statuses."""

    def __init__(self, status: Any) -> None:
        self.status = status
        self.stack_traces = [STACK]

    def check_invariants(self, inputs: list[Any]) -> tuple[Any, Any]:
        return self.status, lambda: str(self.status)

    def run(self, replay: Any) -> Any:
        return replay()


class _StandInManager:
    """A tree manager's decisions as torch's ``_run`` takes them: replay a graph whose check
    passes, else record again; the fast-path warning and the pool checkpoint as torch's."""

    def __init__(self) -> None:
        self.roots: defaultdict[Any, list[Any]] = defaultdict(list)
        self.current_node = None
        self.ids_to_stack_traces = {3: [STACK]}
        self.warned_functions: set[Any] = set()
        self.running_forwards_with_pending_backwards = True

    def run(self, inputs: list[Any], function_id: Any) -> str:
        for child in self.roots[function_id]:
            status, _ = child.check_invariants(inputs)
            if status is cgt.CheckInvariantStatus.SUCCESS:
                return "replayed"
        return self.record_function(inputs, function_id)

    def record_function(self, inputs: list[Any], function_id: Any) -> str:
        return "recorded"

    def check_warn_on_unable_to_start_executing(self, function_id: Any) -> None:
        self.warned_functions.add(function_id)

    def apply_checkpoint_execution_state_in_allocator(self) -> None:
        pass


class _StandInTrees:
    CUDAGraphNode = _StandInNode

    @staticmethod
    def cudagraphify(model: Any, inputs: list[Any], *args: Any, **kwargs: Any) -> str:
        return "made"

    @staticmethod
    def log_cudagraph_skip_and_bump_counter(message: str) -> None:
        pass


# Named as torch's, as the table of patches names the owners (the module is a class here).
for _cls, _module, _name in (
    (_StandInManager, "torch._inductor.cudagraph_trees", "CUDAGraphTreeManager"),
    (_StandInNode, "torch._inductor.cudagraph_trees", "CUDAGraphNode"),
    (_StandInTrees, "torch._inductor", "cudagraph_trees"),
):
    _cls.__module__, _cls.__qualname__ = _module, _name


@pytest.fixture
def events() -> Any:
    seen: list[TorchEvent] = []
    observe.start_observing(seen.append)
    patches = Patches()
    try:
        tree_events.patch_tree_events(_StandInTrees, _StandInManager, patches)  # type: ignore[arg-type]
        yield seen
    finally:
        patches.undo()
        observe.stop_observing(seen.append)


def test_a_graph_recorded_again_carries_torchs_reason(events: list[Any]) -> None:
    manager = _StandInManager()
    status = cgt.CheckInvariantStatus
    assert manager.run([1], 3) == "recorded"  # the first recording: no finding
    manager.roots[3].append(_StandInNode(status.StaticInputIdxMismatch))
    assert manager.run([2], 3) == "recorded"
    assert manager.run([3], 3) == "recorded"
    manager.roots[3][:] = [_StandInNode(status.SUCCESS)]
    assert manager.run([4], 3) == "replayed"
    found = [e for e in events if isinstance(e, Rerecorded)]
    assert (
        found
        == [Rerecorded("MainThread", "step (model.py:7)", "static input data pointer changed")] * 2
    )
    activity = report_activity.TestActivity({})
    for event in events:
        activity.add(event)
    (entry,) = activity.findings()
    assert entry.kind == RERECORD
    assert entry.type == "Rerecord"
    assert entry.message == (
        "torch recorded the CUDA graph of step (model.py:7) again (2 times in this test): "
        "static input data pointer changed"
    )
    assert "copy_" in (entry.hint or "")


def test_a_new_input_size_is_a_graph_recorded_again(events: list[Any]) -> None:
    def model(inputs: list[Any]) -> list[Any]:
        return inputs

    _StandInTrees.cudagraphify(model, [8], stack_traces=[STACK])
    _StandInTrees.cudagraphify(model, [16], stack_traces=[STACK])
    assert events == [Rerecorded("MainThread", "step (model.py:7)", tree_events.NEW_SIZES)]


def test_a_replay_names_the_function_of_the_node_torch_runs(events: list[Any]) -> None:
    node = _StandInNode(None)
    assert tree_events.running_function() is None
    assert node.run(tree_events.running_function) == "step (model.py:7)"
    assert node.run(tree_events.running_function) == "step (model.py:7)"  # the name kept
    assert tree_events.running_function() is None


def test_a_recording_is_in_the_crash_journal_before_its_capture(events: list[Any]) -> None:
    _StandInManager().record_function([1], 3)
    [started] = [e for e in events if isinstance(e, RecordingStarted)]
    assert started == RecordingStarted("MainThread", "step (model.py:7)")
    action = journal_action(started)
    assert action is not None
    assert action.phrase() == (
        "while recording a graph of `step (model.py:7)` in thread `MainThread`"
    )


def _activity_of(events: list[Any]) -> report_activity.TestActivity:
    activity = report_activity.TestActivity({})
    for event in events:
        activity.add(event)
    return activity


def test_the_rerecord_limit_is_a_skip_and_a_finding(events: list[Any]) -> None:
    _StandInTrees.log_cudagraph_skip_and_bump_counter(
        "skipping cudagraph due to function 0 exceeding max re-recording limit (=2) on "
        "cudagraph node None due to static input data pointer changed.\ninput name: primals_1."
    )
    skip, rerecord = events
    assert isinstance(skip, Skipped)
    assert isinstance(rerecord, Rerecorded)
    assert rerecord.reason == skip.reason
    assert skip.reason.endswith("due to static input data pointer changed.")
    [finding] = _activity_of(events).findings()
    assert "now runs it without CUDA graphs" in (finding.hint or "")


def test_leaving_the_fast_path_is_a_finding_once_per_function_and_reason(
    events: list[Any],
) -> None:
    manager = _StandInManager()
    manager.check_warn_on_unable_to_start_executing(3)
    manager.check_warn_on_unable_to_start_executing(3)  # torch warns once per function
    manager.apply_checkpoint_execution_state_in_allocator()
    manager.apply_checkpoint_execution_state_in_allocator()
    entries = _activity_of(events).findings()
    assert [e.kind for e in entries] == [SLOW_PATH, SLOW_PATH]
    warned, checkpointed = entries
    assert "(once in this test)" in warned.message
    assert "pending backward" in warned.message
    assert "(2 times in this test)" in checkpointed.message
    assert all("cudagraph_mark_step_begin" in (e.hint or "") for e in entries)


def test_a_fast_path_check_that_did_not_warn_is_no_finding(events: list[Any]) -> None:
    manager = _StandInManager()
    manager.warned_functions.add(3)  # warned before this test
    manager.check_warn_on_unable_to_start_executing(3)
    assert events == []
