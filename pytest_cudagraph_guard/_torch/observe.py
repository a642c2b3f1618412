"""Observing what torch does with CUDA graphs: compiles (every backend dynamo calls, with the
function it compiles, and every inductor compile with its options), cudagraph wrapping, skips,
recordings, replays, and graphs an earlier test compiled; :mod:`.tree_events` adds CUDAGraph
Trees' own decisions. Started and stopped by the report (its plugin and its crash journal).

Wrappers around the functions that every compile and capture goes through, installed only while
a report is wanted. Each calls back with a typed event (``events``); the wrapped call is
unchanged. Each module is wrapped when it is imported (or at once if it is already): observing
never imports anything, so a report costs no start-up and changes no import order.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

from .cudagraph_settings import cudagraph_settings_here, cudagraph_switches_here
from .events import (
    AUDIENCE,
    INDUCTOR_BACKEND,
    TREES_KEY,
    Compiled,
    CompileEnded,
    CompileOption,
    ConfigValues,
    CrossThread,
    Cudagraphified,
    GraphOrigin,
    Observer,
    RanEarlierGraph,
    Recorded,
    Replayed,
    Skipped,
    emit,
)
from .faults import Loss, run_ours
from .import_hooks import OnEachImport
from .patch_table import PATCHES
from .patches import Patches, owner_class
from .release import release_tuple
from .thread_names import started_outside_python, thread_label
from .tree_events import (
    compiled_function,
    function_id_of,
    function_name,
    last_runtime_skip,
    patch_tree_events,
    running_function,
)
from .trees import CUDAGRAPH_TREES

# From this release compile_fx keeps a compiled function's callable per thread, so no thread
# runs graphs through another thread's tree manager.
PER_THREAD_CALLABLES: Final = (2, 13)
# .function: the function dynamo compiles now; .options: the keys its compile's options set
_COMPILING: Final = threading.local()


def compiling_now() -> tuple[str | None, frozenset[str]]:
    """The function this thread compiles now and the keys its compile's options set."""
    return getattr(_COMPILING, "function", None), getattr(_COMPILING, "options", frozenset())


def settings_moment() -> ConfigValues:
    """The settings as torch acts now, in the acting thread; the test has its first moment."""
    AUDIENCE.settings_wanted = False
    return cudagraph_settings_here()


def options_of(config_patches: object) -> dict[str, CompileOption]:
    if not isinstance(config_patches, dict):
        return {}
    return {str(k): v for k, v in config_patches.items() if isinstance(v, (bool, int, float, str))}


def _on_compile_fx(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    options = options_of(kwargs.get("config_patches"))
    if options:
        _COMPILING.options = frozenset(options)
    if options or not kwargs.get("inner_compile"):
        function = getattr(_COMPILING, "function", None)
        settings = settings_moment()
        emit(Compiled(thread_label(), INDUCTOR_BACKEND, options, settings, function))


def backend_name(compiler_fn: object) -> str:
    """A torch.compile backend as the user named it: its registered name or its callable's."""
    name = getattr(compiler_fn, "__name__", None) or getattr(compiler_fn, "compiler_name", None)
    return str(name or type(compiler_fn).__name__)


def _observed_user_compiler(call_user_compiler: Any) -> Any:
    """Dynamo's call of the backend, with the function it compiles; inductor's compiles are seen
    (with their options) in ``compile_fx``, inside this call."""
    loss = PATCHES["observe.backend"].loss

    def observe(output_graph: Any) -> None:
        function = compiled_function(output_graph)
        _COMPILING.function = function
        name = backend_name(getattr(output_graph, "compiler_fn", None))
        if name != INDUCTOR_BACKEND:
            emit(Compiled(thread_label(), name, {}, cudagraph_settings_here(), function))

    def observe_end(output_graph: Any) -> None:
        name = backend_name(getattr(output_graph, "compiler_fn", None))
        emit(CompileEnded(thread_label(), name, getattr(_COMPILING, "function", None)))

    @functools.wraps(call_user_compiler)
    def call_user_compiler_observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer, outer_options = compiling_now()  # a compile that started inside another
        _COMPILING.options = frozenset()
        run_ours(loss, observe, self)
        try:
            compiled = call_user_compiler(self, *args, **kwargs)
            run_ours(loss, observe_end, self)
            return compiled
        finally:
            _COMPILING.function, _COMPILING.options = outer, outer_options

    return call_user_compiler_observed


def _on_cudagraphify(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    trees = cudagraph_switches_here().get(TREES_KEY)
    emit(Cudagraphified(thread_label(), trees))


def _patch_compile_fx(module: ModuleType, patches: Patches) -> None:
    patches.observe(PATCHES["observe.compile_fx"], module, _on_compile_fx)
    patches.observe(PATCHES["observe.cudagraphify"], module, _on_cudagraphify)


def _patch_output_graph(module: ModuleType, patches: Patches) -> None:
    row = PATCHES["observe.backend"]
    output_graph = owner_class(module, "OutputGraph", row)
    if output_graph is not None:
        patches.apply(row, output_graph, _observed_user_compiler)


class _ObservationState:
    """The wrappers installed for the observers and the modules wrapped so far, and what the
    wrappers keep between calls."""

    def __init__(self) -> None:
        self.patches = Patches()
        self.observed_names: set[str] = set()
        self.in_manager_init = threading.local()
        self.skipped_graphs: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        # Each tree manager seen created: (ident, name) of the thread that created it.
        self.manager_threads: weakref.WeakKeyDictionary[Any, tuple[int, str]] = (
            weakref.WeakKeyDictionary()
        )
        # The test (``AUDIENCE.test_number``) that made each compiled graph and where, by id
        # while it lives, and the graphs the running test has called so far, by thread.
        self.graph_tests: dict[int, tuple[int, GraphOrigin]] = {}
        self.ran_graphs: set[tuple[int, int]] = set()


_STATE: Final = _ObservationState()


def skip_count() -> int:
    """torch's own count of cudagraph skips (``counters["inductor"]["cudagraph_skips"]``)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0
    return int(utils.counters["inductor"]["cudagraph_skips"])


def start_observing(observer: Observer) -> None:
    """Calls ``observer(event)`` for compiles, cudagraph wrapping, skips, recordings, replays and
    the findings of ``events``, in the thread where they happen."""
    AUDIENCE.observers.append(observer)
    if len(AUDIENCE.observers) > 1:
        return
    for name in _OBSERVED_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            _patch_loaded(name, module)
    sys.meta_path.insert(0, _FINDER)


def stop_observing(observer: Observer) -> None:
    if observer in AUDIENCE.observers:
        AUDIENCE.observers.remove(observer)
    if AUDIENCE.observers:
        return
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    _STATE.observed_names.clear()
    _STATE.patches.undo()


def begin_test(nodeid: str = "") -> None:
    """The test ``nodeid`` starts: its first compile, recording or replay reads the settings,
    and graphs compiled before now are an earlier test's."""
    AUDIENCE.test_number += 1
    AUDIENCE.test_name = nodeid
    AUDIENCE.settings_wanted = True
    _STATE.ran_graphs = set()


def end_session() -> None:
    """A session ended: once none observes, the graphs whose skips were seen are forgotten, so
    that the next session sees torch's skips as a fresh process would."""
    if not AUDIENCE.observers:
        _STATE.skipped_graphs.clear()


def _observed_graph_method(method: Any) -> Any:
    """``CompiledFxGraph.__init__`` and ``post_compile`` (a graph loaded from the FX graph
    cache) count cudagraph skips, some without logging them; the reason is on the graph. Each
    graph is noted with the test that made it."""
    skipped = _STATE.skipped_graphs
    loss = PATCHES["observe.graph_init"].loss  # the same loss as graph_post_compile's

    def observe(graph: Any, before: int) -> None:
        origin = _note_made(graph)
        if skip_count() > before and skipped.get(id(graph)) is not graph:
            skipped[id(graph)] = graph  # torch may count one graph's skip twice
            reason = getattr(graph, "disabled_cudagraphs_reason", None) or "unknown"
            if not str(reason).startswith("skipping cudagraphs"):
                reason = f"skipping cudagraphs due to {reason}"
            if origin is not None:
                origin.skip = str(reason)
            emit(Skipped(thread_label(), str(reason)))

    @functools.wraps(method)
    def method_observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        before = run_ours(loss, skip_count)
        result = method(self, *args, **kwargs)
        if before is not None:
            run_ours(loss, observe, self, before)
        return result

    return method_observed


def _note_made(graph: Any) -> GraphOrigin | None:
    """The test, thread, settings and options ``graph`` is made under, noted once per graph;
    None for a graph that cannot be followed."""
    made = _STATE.graph_tests
    noted = made.get(id(graph))
    if noted is not None:
        return noted[1]
    try:
        weakref.finalize(graph, made.pop, id(graph), None)
    except TypeError:  # a graph that cannot be referenced weakly: not followed
        return None
    function, options = compiling_now()
    origin = GraphOrigin(
        AUDIENCE.test_name, thread_label(), cudagraph_settings_here(), options, function
    )
    made[id(graph)] = (AUDIENCE.test_number, origin)
    return origin


def _observed_graph_call(call: Any) -> Any:
    """A graph made before observing began is an earlier test's too."""
    state = _STATE
    loss = PATCHES["observe.graph_call"].loss

    def observe(graph: Any, seen: tuple[int, int]) -> None:
        state.ran_graphs.add(seen)
        test_number, origin = state.graph_tests.get(id(graph), (0, None))
        if test_number < AUDIENCE.test_number:
            emit(RanEarlierGraph(thread_label(), origin, id(graph)))

    def note_runtime_skip(graph: Any, before: int) -> None:
        """A skip that a tree manager decided in the graph's first call (mutated inputs) goes
        with the graph, as a compile's skip does: later tests that run it carry it too."""
        _, origin = state.graph_tests.get(id(graph), (0, None))
        if origin is not None and origin.skip is None and skip_count() > before:
            origin.skip = last_runtime_skip()

    @functools.wraps(call)
    def call_observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen = (id(self), threading.get_ident())
        if seen in state.ran_graphs:
            return call(self, *args, **kwargs)
        run_ours(loss, observe, self, seen)
        before = run_ours(loss, skip_count)
        result = call(self, *args, **kwargs)
        if before is not None:
            run_ours(loss, note_runtime_skip, self, before)
        return result

    return call_observed


def _observed_manager_init(init: Any) -> Any:
    in_init, creators = _STATE.in_manager_init, _STATE.manager_threads
    loss = PATCHES["observe.manager_init"].loss

    def tag(manager: Any) -> None:
        creators[manager] = (threading.get_ident(), thread_label())

    @functools.wraps(init)
    def init_observed(self: Any, *args: Any, **kwargs: Any) -> None:
        in_init.active = True  # its empty pool-initialising capture is not a recording
        try:
            init(self, *args, **kwargs)
        finally:
            in_init.active = False
        run_ours(loss, tag, self)

    return init_observed


def _on_manager_run(args: tuple[Any, ...], kwargs: dict[str, object]) -> None:
    """From a thread other than the tree manager's creator, a run is the ``CrossThread`` event."""
    if started_outside_python(threading.current_thread()):
        return  # autograd's engine threads get the caller's trees from torch, on purpose
    manager, *rest = args
    creator = _STATE.manager_threads.get(manager)
    if creator is not None and creator[0] != threading.get_ident():
        function_id = function_id_of(tuple(rest), kwargs)
        emit(CrossThread(thread_label(), creator[1], function_name(manager, function_id)))


def _on_capture_end(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    if not getattr(_STATE.in_manager_init, "active", False):
        emit(Recorded(thread_label(), settings_moment(), running_function()))


def _on_replay(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    """After the replay (the journal says "after replay N"); the settings only at a test's first
    moment, since a replay is the hot path."""
    settings = settings_moment() if AUDIENCE.settings_wanted else None
    emit(Replayed(thread_label(), settings, running_function()))


def _patch_compiled_graph(module: ModuleType, patches: Patches) -> None:
    """Only where ``CompiledFxGraph`` has ``post_compile``; a class that inherits it or its
    ``__init__`` has changed shape."""
    graph = getattr(module, "CompiledFxGraph", None)
    if isinstance(graph, type) and hasattr(graph, "post_compile"):
        made = patches.apply(PATCHES["observe.graph_init"], graph, _observed_graph_method)
        patches.apply(PATCHES["observe.graph_post_compile"], graph, _observed_graph_method)
        if made:  # which graphs an earlier test made is known only from their making
            patches.apply(PATCHES["observe.graph_call"], graph, _observed_graph_call)


def _patch_trees(module: ModuleType, patches: Patches = _STATE.patches) -> None:
    row = PATCHES["observe.manager_init"]
    manager = owner_class(module, "CUDAGraphTreeManager", row)
    if manager is None:
        return
    patches.apply(row, manager, _observed_manager_init)
    if shares_callables_across_threads():
        patches.observe(PATCHES["observe.manager_run"], manager, _on_manager_run)
    patch_tree_events(module, manager, patches)


def shares_callables_across_threads() -> bool:
    """Whether a compiled function runs its graphs through the tree manager of the thread that
    first ran it, whichever thread calls it (torch < 2.13)."""
    return release_tuple() < PER_THREAD_CALLABLES


def _patch_graphs(module: ModuleType, patches: Patches) -> None:
    rows = PATCHES["observe.capture_end"], PATCHES["observe.replay"]
    graph = owner_class(module, "CUDAGraph", *rows)
    if graph is not None:
        patches.observe(rows[0], graph, _on_capture_end, after=True)
        patches.observe(rows[1], graph, _on_replay, after=True)


_OBSERVED_MODULES: Final[dict[str, Callable[[ModuleType, Patches], None]]] = {
    "torch._inductor.compile_fx": _patch_compile_fx,
    "torch._dynamo.output_graph": _patch_output_graph,
    "torch._inductor.output_code": _patch_compiled_graph,
    "torch._inductor.codecache": _patch_compiled_graph,
    CUDAGRAPH_TREES: _patch_trees,
    "torch.cuda.graphs": _patch_graphs,
}


_PATCHING: Final = Loss("--cudagraph-report", "activity of the modules not yet observed")


def _patch_loaded(name: str, module: ModuleType) -> None:
    """Runs inside the user's import of ``name``: what it raises never reaches the import."""
    if name not in _STATE.observed_names and AUDIENCE.observers:
        _STATE.observed_names.add(name)
        run_ours(_PATCHING, _OBSERVED_MODULES[name], module, _STATE.patches)


def _not_yet_observed(name: str) -> bool:
    return name in _OBSERVED_MODULES and name not in _STATE.observed_names


_FINDER: Final = OnEachImport(_not_yet_observed, _patch_loaded)
