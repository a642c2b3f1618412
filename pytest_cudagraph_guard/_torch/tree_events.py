"""CUDAGraph Trees' own decisions, observed where torch makes them: a function's graph recorded
again (and torch's reason), the fast path left, skips decided at run time. Installed by
:mod:`.observe`, which also names compiled functions with the helpers at the end here, as their
users know them (``step (model.py:12)``): from the code dynamo traces, or from the stack traces
torch records with each graph of CUDAGraph Trees.

Every wrapper but two runs only when torch records, warms up or decides something rare. The two
run before each replay, and only keep something for later: ``CUDAGraphNode.check_invariants``
(torch's check) the reason of a failed check for the recording that follows it, and
``CUDAGraphNode.run`` the node being replayed, whose function a replay's event names.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections.abc import Iterable
from types import ModuleType
from typing import Any, Final

from .events import RecordingStarted, Rerecorded, Skipped, SlowPath, emit
from .faults import run_ours
from .patch_table import PATCHES
from .patches import Patches, owner_class
from .thread_names import thread_label
from .trees import CUDAGRAPH_TREES

# torch's reason where its check answers a plain bool
UNNAMED_MISMATCH: Final = "the recorded graph no longer fits its inputs (torch names no reason)"
NEW_SIZES: Final = "a new input size (torch records one CUDA graph per distinct input size)"
PENDING_BACKWARD: Final = (
    "outputs of a previous step still wait for their backward (pending backward), so torch "
    "cannot start a new step's graphs"
)
LIVE_OUTPUTS: Final = (
    "outputs of graphs run earlier in this step are still alive: torch checkpoints the CUDA "
    "graph pool to record or warm up beside them"
)
PENDING_CHECKPOINT: Final = (
    "forward outputs still wait for their backward: torch checkpoints the CUDA graph pool to "
    "record or warm up beside them"
)
RERECORD_LIMIT: Final = "re-recording limit"


class _TreeState(threading.local):
    """What one thread's tree manager calls leave for the next: the function whose graph is
    being recorded, the node being replayed, and the last failed check of a recorded graph (a
    weak reference: the graph's memory is torch's to free)."""

    recording: str | None = None
    replaying: Any = None
    mismatch_node: weakref.ref[Any] | None = None
    mismatch_reason: str = UNNAMED_MISMATCH
    runtime_skip: str = "unknown"  # the reason of the last skip a tree manager decided


_HERE: Final = _TreeState()
# The models a tree function was made for, with how many: a second is a new input size. A model
# that cannot be referenced weakly is kept by id (one entry per compiled graph).
_MODELS: Final[weakref.WeakKeyDictionary[Any, int]] = weakref.WeakKeyDictionary()
_MODELS_BY_ID: Final[dict[int, int]] = {}
# Each replayed node's function name, worked out at its first replay.
_NODE_NAMES: Final[weakref.WeakKeyDictionary[Any, str]] = weakref.WeakKeyDictionary()


def last_runtime_skip() -> str:
    """The reason of the last skip a tree manager decided in the calling thread."""
    return _HERE.runtime_skip


def running_function() -> str | None:
    """The function whose graph the calling thread records or replays now, where a tree manager
    runs it (a tree records, then replays the graph it recorded)."""
    here = _HERE
    node = here.replaying
    if node is None:
        return here.recording
    name = _NODE_NAMES.get(node)
    if name is None:
        name = _NODE_NAMES[node] = node_function(node)
    return name


def patch_tree_events(module: ModuleType, manager: type, patches: Patches) -> None:
    patches.apply(PATCHES["tree_events.record_function"], manager, _observed_record_function)
    patches.observe(PATCHES["tree_events.checkpoint"], manager, _on_checkpoint)
    patches.apply(PATCHES["tree_events.fast_path_warning"], manager, _observed_fast_path_warning)
    patches.observe(PATCHES["tree_events.cudagraphify"], module, _on_tree_cudagraphify)
    patches.observe(PATCHES["tree_events.runtime_skip"], module, _on_runtime_skip)
    rows = PATCHES["tree_events.check_invariants"], PATCHES["tree_events.node_run"]
    node = owner_class(module, "CUDAGraphNode", *rows)
    if node is not None:
        patches.apply(rows[0], node, _observed_check_invariants)
        patches.apply(rows[1], node, _observed_node_run)


# --- replays -----------------------------------------------------------------------------------


def _observed_node_run(run: Any) -> Any:
    here = _HERE

    @functools.wraps(run)
    def run_observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        here.replaying = self
        try:
            return run(self, *args, **kwargs)
        finally:
            here.replaying = None

    return run_observed


# --- re-recordings ------------------------------------------------------------------------------


def _observed_check_invariants(check: Any) -> Any:
    trees = sys.modules.get(CUDAGRAPH_TREES)
    success = getattr(getattr(trees, "CheckInvariantStatus", None), "SUCCESS", None)
    loss = PATCHES["tree_events.check_invariants"].loss
    here = _HERE

    def note(node: Any, result: Any) -> None:
        here.mismatch_node = weakref.ref(node)
        status = result[0] if isinstance(result, tuple) else None
        here.mismatch_reason = UNNAMED_MISMATCH if status is None else str(status)

    @functools.wraps(check)
    def check_observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = check(self, *args, **kwargs)
        if result is False or (type(result) is tuple and result[0] is not success):
            run_ours(loss, note, self, result)
        return result

    return check_observed


def _observed_record_function(record: Any) -> Any:
    loss = PATCHES["tree_events.record_function"].loss
    here = _HERE

    def observe(manager: Any, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        function_id = function_id_of(args, kwargs)
        name = function_name(manager, function_id)
        here.recording = name
        emit(RecordingStarted(thread_label(), name))
        current = getattr(manager, "current_node", None)
        places = manager.roots if current is None else current.children
        siblings = places.get(function_id) or ()
        if siblings:
            emit(Rerecorded(thread_label(), name, _mismatch_reason(siblings)))

    @functools.wraps(record)
    def record_observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        run_ours(loss, observe, self, args, kwargs)
        try:
            return record(self, *args, **kwargs)
        finally:
            here.recording = None

    return record_observed


def _mismatch_reason(siblings: Iterable[Any]) -> str:
    """The status of the last failed check of one of these graphs, in this thread."""
    noted = _HERE.mismatch_node
    node = noted() if noted is not None else None
    _HERE.mismatch_node = None
    if node is not None and any(node is sibling for sibling in siblings):
        return _HERE.mismatch_reason
    return UNNAMED_MISMATCH


def _on_tree_cudagraphify(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    model = kwargs.get("model", args[0] if args else None)
    if _times_made(model):
        traces = kwargs.get("stack_traces")
        name = name_from_traces(traces if isinstance(traces, Iterable) else None)
        emit(Rerecorded(thread_label(), name or str(getattr(model, "__name__", model)), NEW_SIZES))


def _times_made(model: Any) -> int:
    """How many tree functions were made for ``model`` before this one."""
    try:
        made = _MODELS.get(model, 0)
        _MODELS[model] = made + 1
    except TypeError:
        made = _MODELS_BY_ID.get(id(model), 0)
        _MODELS_BY_ID[id(model)] = made + 1
    return made


def _on_runtime_skip(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    """The re-recording limit reached is a re-recording finding too."""
    text = str(args[0] if args else kwargs.get("msg", "")).strip()
    reason = text.splitlines()[0] if text else "unknown"
    thread = thread_label()
    _HERE.runtime_skip = reason
    emit(Skipped(thread, reason))
    if RERECORD_LIMIT in reason:
        noted = _HERE.mismatch_node
        node = noted() if noted is not None else None
        name = node_function(node) if node is not None else "compiled function"
        emit(Rerecorded(thread, name, reason))


# --- the slow path ------------------------------------------------------------------------------


def _on_checkpoint(args: tuple[Any, ...], kwargs: dict[str, object]) -> None:
    node = getattr(args[0], "current_node", None)
    pending = bool(getattr(args[0], "running_forwards_with_pending_backwards", False))
    reason = PENDING_CHECKPOINT if pending else LIVE_OUTPUTS
    emit(SlowPath(thread_label(), node_function(node), reason))


def _observed_fast_path_warning(check_warn: Any) -> Any:
    """torch's warning that a function cannot reach the fast path (``Unable to hit fast path of
    CUDAGraphs ...``), seen as the function joining the manager's ``warned_functions``."""
    loss = PATCHES["tree_events.fast_path_warning"].loss

    def warned_before(manager: Any, function_id: Any) -> bool:
        return function_id in manager.warned_functions

    def observe(manager: Any, function_id: Any) -> None:
        if function_id in manager.warned_functions:
            emit(SlowPath(thread_label(), function_name(manager, function_id), PENDING_BACKWARD))

    @functools.wraps(check_warn)
    def check_warn_observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        function_id = args[0] if args else kwargs.get("function_id")
        before = run_ours(loss, warned_before, self, function_id)
        result = check_warn(self, *args, **kwargs)
        if before is False:
            run_ours(loss, observe, self, function_id)
        return result

    return check_warn_observed


# --- compiled functions as their users know them -----------------------------------------------


def function_name(manager: Any, function_id: Any) -> str:
    """A compiled function as its user knows it: the innermost user frame of its recorded stack
    traces (``fn (model.py:12)``), else its tree manager's function id."""
    traces = getattr(manager, "ids_to_stack_traces", {}).get(function_id)
    return name_from_traces(traces) or unnamed(function_id)


def unnamed(function_id: Any) -> str:
    return f"compiled function #{getattr(function_id, 'id', function_id)}"


def name_from_traces(traces: Iterable[Any] | None) -> str | None:
    for trace in traces or ():
        frames = [line.strip() for line in str(trace or "").splitlines()]
        frames = [line for line in frames if line.startswith("File ")]
        if frames:
            where, _, name = frames[-1].rpartition(", in ")
            file_part, _, line_part = where.partition(", line ")
            return _as_user_knows_it(name, file_part.removeprefix("File ").strip('"'), line_part)
    return None


def node_function(node: Any) -> str:
    function_id = getattr(getattr(node, "wrapped_function", None), "id", None)
    return name_from_traces(getattr(node, "stack_traces", None)) or unnamed(function_id)


def function_id_of(args: tuple[object, ...], kwargs: dict[str, object]) -> object:
    """The ``function_id`` argument of a tree manager's method, however it was passed."""
    return kwargs.get("function_id", args[1] if len(args) > 1 else None)


def compiled_function(output_graph: Any) -> str | None:
    """The function dynamo compiles, as its user knows it (``step (model.py:12)``), from the
    code it traces."""
    fields = getattr(output_graph, "co_fields", None)
    if not isinstance(fields, dict) or not fields.get("co_name"):
        return None
    file_path, line = fields.get("co_filename") or "?", fields.get("co_firstlineno", "?")
    return _as_user_knows_it(fields["co_name"], str(file_path), line)


def _as_user_knows_it(name: str, file_path: str, line: object) -> str:
    """``step (model.py:12)``: the function, its file's name and the line."""
    file_name = file_path.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{name} ({file_name}:{line})"
