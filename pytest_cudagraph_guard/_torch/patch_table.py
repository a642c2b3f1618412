"""Every torch internal the plugin patches, wraps or swaps: one row each, with the releases it
applies to, why, and what the user loses where it cannot be applied. Only :mod:`.patches`
replaces them, each replacement naming its row, so this table lists the whole surface touched."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, NamedTuple

from .faults import Loss


class PatchRow(NamedTuple):
    """One torch attribute the plugin replaces."""

    id: str  # module.name: tests refer to it, and a test checks the module uses it
    owner: str  # dotted path of the module or class; alternatives (by release) split by " | "
    attribute: str
    releases: str  # the torch releases where it is replaced
    loss: Loss  # the feature, and what the user goes without where it cannot be applied
    why: str

    def owners(self) -> tuple[str, ...]:
        return tuple(part.strip() for part in self.owner.split("|"))


_CONFIG_MODULES: Final = "torch._inductor.config | torch._dynamo.config"
_MANAGER: Final = "torch._inductor.cudagraph_trees.CUDAGraphTreeManager"
_GRAPH: Final = (
    "torch._inductor.output_code.CompiledFxGraph | torch._inductor.codecache.CompiledFxGraph"
)
_CUDA_GRAPH: Final = "torch.cuda.graphs.CUDAGraph"
_GUARD: Final = "--cudagraph-guard"
_REPORT: Final = "--cudagraph-report"
_TLS_INIT: Final = 'cudagraph_thread(tls="init")'
_LOCKED_WHY: Final = (
    "held under one process-wide lock, as 2.13 takes graph_capture_lock: captures in several "
    "threads must not overlap"
)
_COUNTING: Final = Loss(
    _GUARD,
    "the quick 'nothing changed' check (each test's config is compared in full, which is slower)",
)
_LOCKED: Final = Loss(_TLS_INIT, "capture serialisation between threads (captures may overlap)")
_SKIPS: Final = Loss(_REPORT, "cudagraph skips and their reasons")
_TREES: Final = "torch._inductor.cudagraph_trees"
_NODE: Final = "torch._inductor.cudagraph_trees.CUDAGraphNode"
_RERECORD: Final = Loss(_REPORT, "the rerecord finding")
_SLOW_PATH: Final = Loss(_REPORT, "the slow-path finding")

_ROWS: Final = (
    PatchRow(
        "counting.config_module_class",
        _CONFIG_MODULES,
        "__class__",
        "2.1+",
        _COUNTING,
        "a subclass of the module's own class counts every __setattr__/__delattr__, so the "
        "guard tells 'nothing changed' without comparing snapshots",
    ),
    PatchRow(
        "counting.config_entry_class",
        "torch.utils._config_module._ConfigEntry",
        "__class__",
        "2.6+",
        _COUNTING,
        "entries count their own writes too: a default replaced or hide set by hand",
    ),
    PatchRow(
        "trees.get_obj",
        "torch._inductor.cudagraph_trees",
        "get_obj",
        "2.1-2.12",
        Loss(
            "cudagraph_thread, --cudagraph-settings",
            "the main thread's CUDA graph trees state after a worker thread imported them first",
        ),
        "where a worker thread imports cudagraph_trees first, the main thread is given its "
        "per-thread state when it first needs it, as 2.13's get_obj does",
    ),
    PatchRow("trees.lock_manager_init", _MANAGER, "__init__", "2.1-2.12", _LOCKED, _LOCKED_WHY),
    PatchRow("trees.lock_run_eager", _MANAGER, "run_eager", "2.1-2.12", _LOCKED, _LOCKED_WHY),
    PatchRow(
        "trees.lock_record_function", _MANAGER, "record_function", "2.1-2.12", _LOCKED, _LOCKED_WHY
    ),
    PatchRow(
        "trees.fx_tracing_check",
        "torch.fx._symbolic_trace",
        "is_fx_symbolic_tracing",
        "2.9+ (before, dynamo consults is_fx_tracing, which is not replaced)",
        Loss(
            _TLS_INIT,
            "the per-thread FX tracing check (one thread's tracing can fail another's compiled "
            "call)",
        ),
        "torch.fx's tracing flag is process-wide: while one thread traces, dynamo would reject "
        "a compiled call in any other thread; the check is made true only inside this thread's "
        "Tracer.trace",
    ),
    PatchRow(
        "observe.compile_fx",
        "torch._inductor.compile_fx",
        "compile_fx",
        "2.1+",
        Loss(_REPORT, "compile counts and their options"),
        "every inductor compile, with its options and the cudagraph switches it sees",
    ),
    PatchRow(
        "observe.cudagraphify",
        "torch._inductor.compile_fx",
        "cudagraphify",
        "2.1+",
        Loss(_REPORT, "counts of cudagraphed graphs"),
        "every graph wrapped for CUDA graphs, with or without trees",
    ),
    PatchRow(
        "observe.graph_init",
        _GRAPH,
        "__init__",
        "where CompiledFxGraph defines post_compile",
        _SKIPS,
        "cudagraph skips of a compiled graph and their reason, some never logged by torch",
    ),
    PatchRow(
        "observe.graph_post_compile",
        _GRAPH,
        "post_compile",
        "where CompiledFxGraph defines post_compile",
        _SKIPS,
        "cudagraph skips of a graph loaded from the FX graph cache",
    ),
    PatchRow(
        "observe.manager_init",
        _MANAGER,
        "__init__",
        "2.1+",
        Loss(
            _REPORT,
            "telling a tree manager's set-up capture from a recording (recordings may count one "
            "more), and the cross-thread-graph finding",
        ),
        "the empty capture a tree manager makes to set up its pool is not counted as a recording; "
        "each manager is tagged with the thread that created it",
    ),
    PatchRow(
        "observe.backend",
        "torch._dynamo.output_graph.OutputGraph",
        "call_user_compiler",
        "2.1+",
        Loss(_REPORT, "compile counts of backends other than inductor"),
        "every torch.compile backend call (eager, aot_eager, cudagraphs, custom callables), "
        "named; inductor's own compiles are seen through compile_fx",
    ),
    PatchRow(
        "observe.manager_run",
        _MANAGER,
        "run",
        "2.1-2.12",
        Loss(_REPORT, "the cross-thread-graph finding"),
        "a CUDA graph recorded or replayed through a tree manager that another thread created "
        "(one compiled function shared by threads): the cross-thread-graph finding",
    ),
    PatchRow(
        "observe.capture_end",
        _CUDA_GRAPH,
        "capture_end",
        "2.1+",
        Loss(_REPORT, "recording counts"),
        "every CUDA graph recorded",
    ),
    PatchRow(
        "observe.replay",
        _CUDA_GRAPH,
        "replay",
        "2.1+",
        Loss(_REPORT, "replay counts"),
        "every CUDA graph replayed; the settings at a test's first replay",
    ),
    PatchRow(
        "observe.graph_call",
        _GRAPH,
        "__call__",
        "where CompiledFxGraph defines post_compile",
        Loss(_REPORT, "the count of graphs an earlier test compiled"),
        "a test's first call of each compiled graph: one that an earlier test compiled is "
        "counted (dynamo's cache serves it, so nothing compiles in this test)",
    ),
    PatchRow(
        "tree_events.record_function",
        _MANAGER,
        "record_function",
        "2.1+",
        _RERECORD,
        "every recording through a tree manager: the function recorded, and a function "
        "recorded again at the same place of its tree",
    ),
    PatchRow(
        "tree_events.check_invariants",
        _NODE,
        "check_invariants",
        "2.1+",
        _RERECORD,
        "torch's check before a replay: the status of a failed check (static input data "
        "pointer changed, ...) is the reason of the recording that follows",
    ),
    PatchRow(
        "tree_events.node_run",
        _NODE,
        "run",
        "2.1+",
        Loss(
            _REPORT, "the function named in a replay's journal line (a crash says 'a CUDA graph')"
        ),
        "a recorded graph's replay: the function a replay runs, for a crash's last activity",
    ),
    PatchRow(
        "tree_events.cudagraphify",
        _TREES,
        "cudagraphify",
        "2.1+",
        _RERECORD,
        "a tree function made for a model that has one already: a new input size of a "
        "dynamic-shape graph",
    ),
    PatchRow(
        "tree_events.runtime_skip",
        _TREES,
        "log_cudagraph_skip_and_bump_counter",
        "2.4+",
        Loss(_REPORT, "cudagraph skips decided while running, and the re-recording limit"),
        "skips a tree manager decides while running: mutated inputs, the re-recording limit "
        "reached (a rerecord finding too)",
    ),
    PatchRow(
        "tree_events.checkpoint",
        _MANAGER,
        "apply_checkpoint_execution_state_in_allocator",
        "2.1+",
        _SLOW_PATH,
        "torch checkpoints the CUDA graph pool (its slow path) to record or warm up while "
        "graphs it ran have live outputs",
    ),
    PatchRow(
        "tree_events.fast_path_warning",
        _MANAGER,
        "check_warn_on_unable_to_start_executing",
        "2.1+",
        _SLOW_PATH,
        "torch's 'Unable to hit fast path of CUDAGraphs' warning: outputs of a previous step "
        "still wait for their backward",
    ),
)

PATCHES: Final[Mapping[str, PatchRow]] = MappingProxyType({row.id: row for row in _ROWS})
