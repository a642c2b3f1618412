"""What torch did with CUDA graphs while one test ran, in any thread, as the report's
``Activity`` record; the compiles whose cudagraph settings differ from the main thread's, and the
graphs run through another thread's tree manager."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any, Final, NamedTuple

from .. import _torch
from ..core.diagnosis import CONFIG_DIVERGENCE, CROSS_THREAD_GRAPH
from ..core.records import (
    Activity,
    CompiledEntry,
    ErrorEntry,
    SkipEntry,
    ThreadActivity,
    activity_record,
    compiled_entry,
    error_entry,
)
from ..core.settings import jsonable

INDUCTOR: Final = "inductor"
CUDAGRAPHS_BACKEND: Final = "cudagraphs"


class Compile(NamedTuple):
    """One torch.compile seen: its thread, backend, options, and the thread's settings then."""

    thread: str
    backend: str
    options: dict[str, Any]
    settings: dict[str, Any]

    def effective(self, key: str) -> Any:
        return self.options.get(key, self.settings.get(key))

    def wants_cudagraphs(self) -> bool:
        if self.backend == CUDAGRAPHS_BACKEND:
            return True
        return self.backend == INDUCTOR and bool(self.effective("triton.cudagraphs"))


class CrossThreadRun(NamedTuple):
    """A compiled function run in ``thread`` through the tree manager ``creator`` created."""

    thread: str
    creator: str
    function: str


class TestActivity:
    """What torch did with CUDA graphs while one test ran, in any thread."""

    def __init__(self, main_settings: dict[str, Any]) -> None:
        self.main_settings = main_settings
        self.skips_at_start = _torch.skip_count()
        self.skip_counter = 0
        self.compiled: list[Compile] = []
        self.cudagraphified: Counter[str] = Counter()
        self.recorded: Counter[str] = Counter()
        self.replays: Counter[str] = Counter()
        self.skips: list[SkipEntry] = []
        self.cross_thread: dict[CrossThreadRun, None] = {}

    def add(self, event: str, data: dict[str, Any]) -> None:
        """One event of torch's, as the observer of :mod:`.._torch` reports it."""
        thread = data["thread"]
        if event == "compile":
            backend = str(data.get("backend", INDUCTOR))
            self.compiled.append(Compile(thread, backend, data["options"], data["settings"]))
        elif event == "cudagraphify":
            self.cudagraphified[thread] += 1
        elif event == "recorded":
            self.recorded[thread] += 1
        elif event == "replay":
            self.replays[thread] += 1
        elif event == "skip":
            self.skips.append(SkipEntry(thread=thread, reason=data["reason"]))
        elif event == "cross-thread":
            self.cross_thread[CrossThreadRun(thread, data["creator"], data["function"])] = None

    def finish(self) -> None:
        self.skip_counter = _torch.skip_count() - self.skips_at_start

    def happened(self) -> bool:
        """Whether torch compiled anything or did CUDA-graph work."""
        return bool(
            self.compiled or self.cudagraphified or self.recorded or self.replays or self.skips
        )

    def compiled_settings(self) -> dict[str, Any]:
        """The cudagraph settings that every inductor compile of the test had alike (a compile's
        options win over its thread's settings)."""
        compiles = [c for c in self.compiled if c.backend == INDUCTOR]
        if not compiles:
            return {}
        agreed = {}
        for key in compiles[0].settings:
            values = {repr(c.effective(key)) for c in compiles}
            if len(values) == 1:
                agreed[key] = compiles[0].effective(key)
        return agreed

    def cross_thread_graphs(self) -> list[ErrorEntry]:
        """Each compiled function run through another thread's tree manager, once per pair of
        threads."""
        return [_cross_thread_entry(run) for run in self.cross_thread]

    def as_record(self) -> Activity:
        threads = sorted(
            {c.thread for c in self.compiled}
            | set(self.cudagraphified)
            | set(self.recorded)
            | set(self.replays)
            | {s["thread"] for s in self.skips}
        )
        return activity_record(
            compiled=[_compiled_entry(c) for c in self.compiled],
            cudagraphed_graphs=sum(self.cudagraphified.values()),
            recorded=sum(self.recorded.values()),
            replays=sum(self.replays.values()),
            skips=list(self.skips),
            torch_skip_counter=self.skip_counter,
            by_thread={thread: self._in_thread(thread) for thread in threads},
        )

    def _in_thread(self, thread: str) -> ThreadActivity:
        return ThreadActivity(
            compiled=sum(1 for c in self.compiled if c.thread == thread),
            cudagraphed_graphs=self.cudagraphified[thread],
            recorded=self.recorded[thread],
            replays=self.replays[thread],
            skips=sum(1 for s in self.skips if s["thread"] == thread),
        )

    def divergences(
        self, marker_switches: Mapping[str, bool] | None, marker_threads: Collection[str] = ()
    ) -> list[ErrorEntry]:
        """Functions compiled in a non-main thread with cudagraph settings other than the main
        thread's at the test's start (torch >= 2.12 keeps config overrides per thread); in the
        marker's threads, the marker's switches are intended too."""
        found = []
        main = threading.main_thread().name
        for compiled in self.compiled:
            thread = compiled.thread
            if thread == main or compiled.backend != INDUCTOR:
                continue
            intended = dict(self.main_settings)
            if marker_switches and thread in marker_threads:
                intended.update(marker_switches)
            for key, wanted in intended.items():
                seen = compiled.settings.get(key)
                if key not in compiled.options and seen != wanted:
                    found.append(_divergence(thread, key, seen, wanted))
        return found


def _compiled_entry(compiled: Compile) -> CompiledEntry:
    return compiled_entry(
        thread=compiled.thread,
        backend=compiled.backend,
        options=jsonable(compiled.options),
        cudagraphs=compiled.wants_cudagraphs(),
        trees=jsonable(compiled.effective("triton.cudagraph_trees")),
        settings=jsonable(compiled.settings),
    )


def _cross_thread_entry(run: CrossThreadRun) -> ErrorEntry:
    message = (
        f"{run.function} ran its CUDA graphs in thread {run.thread!r} through the CUDAGraph "
        f"Trees manager of thread {run.creator!r}"
    )
    hint = (
        "this torch keeps a compiled function's CUDA graphs in the tree manager of the thread "
        "that first ran it, so threads sharing one compiled function record and replay in "
        "another thread's state, which can corrupt the interpreter: compile the function once "
        "per thread (its own torch.compile call), or upgrade to torch 2.13, where each thread "
        "gets its own callable"
    )
    return error_entry(run.thread, "CrossThreadGraph", message, kind=CROSS_THREAD_GRAPH, hint=hint)


def _divergence(thread: str, key: str, seen: Any, wanted: Any) -> ErrorEntry:
    if _torch.config_is_process_wide():
        hint = (
            "config is process-wide on this torch: something changed it between the test's "
            "start and this compile"
        )
    else:
        hint = (
            "torch >= 2.12 keeps config overrides per thread, so a thread started with "
            "threading.Thread sees the defaults: start it with contextvars.copy_context().run, "
            "set the config inside the thread, or pass mode=/options= to torch.compile"
        )
    message = (
        f"a function was compiled in thread {thread!r} with {key}={seen!r}; the main "
        f"thread had {key}={wanted!r} at the test's start"
    )
    return error_entry(thread, "ConfigDivergence", message, kind=CONFIG_DIVERGENCE, hint=hint)
