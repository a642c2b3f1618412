"""What torch did with CUDA graphs while one test ran, in any thread, as the report's
``Activity`` record; the moments torch acted (for the settings it acted under), and the
findings: compiles whose cudagraph settings differ from the main thread's, graphs run through
another thread's tree manager, graphs recorded again, the fast path left. :mod:`.plugin` keeps
one ``TestActivity`` per test."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final, NamedTuple

from .._torch import events
from ..core.records import (
    Activity,
    CompiledEntry,
    ErrorEntry,
    SkipEntry,
    ThreadActivity,
)
from ..core.settings import jsonable
from .torch_findings import (
    CrossThreadRun,
    Seen,
    cross_thread_entry,
    divergence_entry,
    earlier_divergence_entry,
    rerecord_entry,
    slow_path_entry,
)

INDUCTOR: Final = "inductor"
CUDAGRAPHS_BACKEND: Final = "cudagraphs"
CUDAGRAPHS_KEY: Final = "triton.cudagraphs"
TREES_KEY: Final = "triton.cudagraph_trees"


class Compile(NamedTuple):
    """One torch.compile seen: its thread, backend, options, and the thread's settings then."""

    thread: str
    backend: str
    options: dict[str, events.CompileOption]
    settings: events.ConfigValues

    def effective(self, key: str) -> object:
        return self.options.get(key, self.settings.get(key))

    def wants_cudagraphs(self) -> bool:
        if self.backend == CUDAGRAPHS_BACKEND:
            return True
        return self.backend == INDUCTOR and bool(self.effective(CUDAGRAPHS_KEY))


class Moment(NamedTuple):
    """A moment torch acted on CUDA graphs (an inductor compile, a recording, a replay): the
    settings in effect in its thread, and the keys a compile's options set."""

    thread: str
    values: events.ConfigValues
    options: frozenset[str] = frozenset()


class TestActivity:
    """What torch did with CUDA graphs while one test ran, in any thread."""

    def __init__(self, main_settings: events.ConfigValues) -> None:
        from .._torch import observe

        self.main_settings = main_settings
        self.skips_at_start = observe.skip_count()
        self.skip_counter = 0
        self.compiled: list[Compile] = []
        self.cudagraphified: Counter[str] = Counter()
        self.recorded: Counter[str] = Counter()
        self.replays: Counter[str] = Counter()
        self.skips: list[SkipEntry] = []
        self.cross_thread: dict[CrossThreadRun, None] = {}
        self.moments: list[Moment] = []
        self.rerecords: Counter[Seen] = Counter()
        self.slow_paths: Counter[Seen] = Counter()
        self.earlier_compiled = 0
        self.earlier_graphs: set[int] = set()
        self.earlier_runs: list[tuple[str, events.GraphOrigin]] = []  # (thread, where it was made)

    def add(self, event: events.TorchEvent) -> None:
        """One event of torch's, as the observer of :mod:`.._torch` reports it."""
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    # -- one method per event ----------------------------------------------------------------

    def _on_compiled(self, event: events.Compiled) -> None:
        compiled = Compile(event.thread, event.backend, event.options, event.settings)
        self.compiled.append(compiled)
        if event.backend == INDUCTOR:
            values = {key: compiled.effective(key) for key in event.settings}
            self.moments.append(Moment(event.thread, values, frozenset(event.options)))

    def _on_cudagraphified(self, event: events.Cudagraphified) -> None:
        self.cudagraphified[event.thread] += 1

    def _on_recorded(self, event: events.Recorded) -> None:
        self.recorded[event.thread] += 1
        self.moments.append(Moment(event.thread, event.settings))

    def _on_replayed(self, event: events.Replayed) -> None:
        self.replays[event.thread] += 1
        if event.settings is not None and not self.moments:
            self.moments.append(Moment(event.thread, event.settings))

    def _on_skipped(self, event: events.Skipped) -> None:
        self.skips.append(SkipEntry(thread=event.thread, reason=event.reason))

    def _on_cross_thread(self, event: events.CrossThread) -> None:
        self.cross_thread[CrossThreadRun(event.thread, event.creator, event.function)] = None

    def _on_rerecorded(self, event: events.Rerecorded) -> None:
        self.rerecords[Seen(event.thread, event.function, event.reason)] += 1

    def _on_slow_path(self, event: events.SlowPath) -> None:
        self.slow_paths[Seen(event.thread, event.function, event.reason)] += 1

    def _on_ran_earlier_graph(self, event: events.RanEarlierGraph) -> None:
        """Code an earlier test compiled carries its entries into this test: its skip, and (in
        ``divergences``) the settings it was compiled under."""
        if event.graph not in self.earlier_graphs:
            self.earlier_graphs.add(event.graph)
            self.earlier_compiled += 1
        origin = event.origin
        if origin is None:
            return
        self.earlier_runs.append((event.thread, origin))
        if origin.skip is not None:
            self.skips.append(SkipEntry(thread=event.thread, reason=origin.skip))

    # -- the record ----------------------------------------------------------------------------

    def finish(self) -> None:
        from .._torch import observe

        self.skip_counter = observe.skip_count() - self.skips_at_start

    def findings(self) -> list[ErrorEntry]:
        """Each compiled function run through another thread's tree manager (once per pair of
        threads), recorded again or off the fast path (once per thread, function and reason,
        with the count)."""
        return [
            *(cross_thread_entry(run) for run in self.cross_thread),
            *(rerecord_entry(seen, count) for seen, count in self.rerecords.items()),
            *(slow_path_entry(seen, count) for seen, count in self.slow_paths.items()),
        ]

    def as_record(self) -> Activity:
        threads = sorted(
            {c.thread for c in self.compiled}
            | set(self.cudagraphified)
            | set(self.recorded)
            | set(self.replays)
            | {s["thread"] for s in self.skips}
        )
        return Activity(
            compiled=[_compiled_entry(c) for c in self.compiled],
            cudagraphed_graphs=sum(self.cudagraphified.values()),
            recorded=sum(self.recorded.values()),
            replays=sum(self.replays.values()),
            skips=list(self.skips),
            torch_skip_counter=self.skip_counter,
            by_thread={thread: self._in_thread(thread) for thread in threads},
            earlier_compiled=self.earlier_compiled,
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
            intended = self._intended(thread, marker_switches, marker_threads)
            for key, wanted in intended.items():
                seen = compiled.settings.get(key)
                if key not in compiled.options and seen != wanted:
                    found.append(divergence_entry(thread, key, seen, wanted))
        for thread, origin in self.earlier_runs:
            if thread == main:
                continue
            intended = self._intended(thread, marker_switches, marker_threads)
            for key, wanted in intended.items():
                seen = origin.settings.get(key)
                if key not in origin.options and seen != wanted:
                    found.append(earlier_divergence_entry(thread, origin, key, seen, wanted))
        return found

    def _intended(
        self,
        thread: str,
        marker_switches: Mapping[str, bool] | None,
        marker_threads: Collection[str],
    ) -> dict[str, object]:
        """The cudagraph settings the test means a compile in ``thread`` to have: the main
        thread's at the test's start, and in the marker's threads the marker's switches."""
        intended = dict(self.main_settings)
        if marker_switches and thread in marker_threads:
            intended.update(marker_switches)
        return intended


_HANDLERS: Final[dict[type, Callable[[TestActivity, Any], None]]] = {
    events.Compiled: TestActivity._on_compiled,
    events.Cudagraphified: TestActivity._on_cudagraphified,
    events.Recorded: TestActivity._on_recorded,
    events.Replayed: TestActivity._on_replayed,
    events.Skipped: TestActivity._on_skipped,
    events.CrossThread: TestActivity._on_cross_thread,
    events.Rerecorded: TestActivity._on_rerecorded,
    events.SlowPath: TestActivity._on_slow_path,
    events.RanEarlierGraph: TestActivity._on_ran_earlier_graph,
}


def _compiled_entry(compiled: Compile) -> CompiledEntry:
    return CompiledEntry(
        thread=compiled.thread,
        backend=compiled.backend,
        options=jsonable(compiled.options),
        cudagraphs=compiled.wants_cudagraphs(),
        trees=jsonable(compiled.effective(TREES_KEY)),
        settings=jsonable(compiled.settings),
    )
