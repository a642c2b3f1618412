"""What torch did with CUDA graphs while one test ran, in any thread, as the report's
``Activity`` record; the findings: compiles whose cudagraph settings differ from the main
thread's, graphs run through another thread's tree manager, graphs recorded again, the fast path
left. :mod:`.plugin` keeps one ``TestActivity`` per test.

And the test's settings as torch acted under them (``settings_as_acted``): for each key, its
value at the first moment torch compiled, recorded or replayed in a thread where the test's body
ran, else at the test's end. Other threads (one the test started, torch's own) are not where the
test's settings apply: what they compiled under is in each compile's entry, and a divergence from
the test's is a finding. A value that a ``tearDown`` or the end of a ``with`` block put back is no
value of the test's; a key torch acted under with several values lists them."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Final, NamedTuple

from .._torch import events
from ..core.entries import ErrorEntry, SettingEntry
from ..core.records import Activity, CompiledEntry, SkipEntry, ThreadActivity
from ..torch_settings import default_entry, jsonable
from .torch_findings import (
    cross_thread_entry,
    divergence_entry,
    earlier_divergence_entry,
    repeated_entry,
)

CUDAGRAPHS_BACKEND: Final = "cudagraphs"
COMPILE_SOURCE: Final = "compile"
TEST_SOURCE: Final = "test"


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
        return self.backend == events.INDUCTOR_BACKEND and bool(
            self.effective(events.CUDAGRAPHS_KEY)
        )


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
        self.cross_thread: dict[events.CrossThread, None] = {}
        self.moments: list[Moment] = []
        self.rerecords: Counter[events.Rerecorded] = Counter()
        self.slow_paths: Counter[events.SlowPath] = Counter()
        self.earlier_compiled = 0
        self.earlier_graphs: set[int] = set()
        self.earlier_runs: list[tuple[str, events.GraphOrigin]] = []  # (thread, where it was made)

    def add(self, event: events.TorchEvent) -> None:
        """One event of torch's, as the observer of :mod:`.._torch` reports it."""
        match event:
            case events.Compiled():
                compiled = Compile(event.thread, event.backend, event.options, event.settings)
                self.compiled.append(compiled)
                if event.backend == events.INDUCTOR_BACKEND:
                    values = {key: compiled.effective(key) for key in event.settings}
                    self.moments.append(Moment(event.thread, values, frozenset(event.options)))
            case events.Cudagraphified():
                self.cudagraphified[event.thread] += 1
            case events.Recorded():
                self.recorded[event.thread] += 1
                self.moments.append(Moment(event.thread, event.settings))
            case events.Replayed():
                self.replays[event.thread] += 1
                if event.settings is not None and not self.moments:
                    self.moments.append(Moment(event.thread, event.settings))
            case events.Skipped():
                self.skips.append(SkipEntry(thread=event.thread, reason=event.reason))
            case events.CrossThread():
                self.cross_thread[event] = None
            case events.Rerecorded():
                self.rerecords[event] += 1
            case events.SlowPath():
                self.slow_paths[event] += 1
            case events.RanEarlierGraph():
                self._ran_earlier_graph(event)

    def _ran_earlier_graph(self, event: events.RanEarlierGraph) -> None:
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
            *(repeated_entry(seen, count) for seen, count in self.rerecords.items()),
            *(repeated_entry(seen, count) for seen, count in self.slow_paths.items()),
        ]

    def as_record(self) -> Activity:
        threads = sorted(
            {c.thread for c in self.compiled}
            | set(self.cudagraphified)
            | set(self.recorded)
            | set(self.replays)
            | {s.thread for s in self.skips}
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
            skips=sum(1 for s in self.skips if s.thread == thread),
        )

    def divergences(
        self, marker_switches: Mapping[str, bool] | None, marker_threads: Collection[str] = ()
    ) -> list[ErrorEntry]:
        """Functions compiled in a non-main thread (here, or by an earlier test whose code this
        one ran) with cudagraph settings other than the main thread's at the test's start (torch
        >= 2.12 keeps config overrides per thread); in the marker's threads, the marker's
        switches are intended too."""
        main = threading.main_thread().name
        switches = (marker_switches or {}, marker_threads)
        found = [
            divergence_entry(c.thread, key, seen, wanted)
            for c in self.compiled
            if c.thread != main and c.backend == events.INDUCTOR_BACKEND
            for key, seen, wanted in self._diverging(c.thread, c.settings, c.options, *switches)
        ]
        found += [
            earlier_divergence_entry(thread, origin, key, seen, wanted)
            for thread, origin in self.earlier_runs
            if thread != main
            for key, seen, wanted in self._diverging(
                thread, origin.settings, origin.options, *switches
            )
        ]
        return found

    def _diverging(
        self,
        thread: str,
        settings: events.ConfigValues,
        options: Collection[str],
        marker_switches: Mapping[str, bool],
        marker_threads: Collection[str],
    ) -> Iterator[tuple[str, object, object]]:
        """Each key (not set by the compile's ``options``) whose value in ``settings`` differs
        from the one the test means a compile in ``thread`` to have: the main thread's at the
        test's start, and in the marker's threads the marker's switches."""
        intended = dict(self.main_settings)
        if thread in marker_threads:
            intended.update(marker_switches)
        for key, wanted in intended.items():
            seen = settings.get(key)
            if key not in options and seen != wanted:
                yield key, seen, wanted


def _compiled_entry(compiled: Compile) -> CompiledEntry:
    return CompiledEntry(
        thread=compiled.thread,
        backend=compiled.backend,
        options=jsonable(compiled.options),
        cudagraphs=compiled.wants_cudagraphs(),
        trees=jsonable(compiled.effective(events.TREES_KEY)),
        settings=jsonable(compiled.settings),
    )


# -- the settings torch acted under ----------------------------------------------------------


class ActedSettings(NamedTuple):
    settings: dict[str, SettingEntry]  # at torch's first moment (at the end where it had none)
    at_end: dict[str, SettingEntry]  # the keys whose value at the end differs (JSON only)
    varied: dict[str, list[Any]]  # the keys torch acted under with several values, in order


class _Value(NamedTuple):
    value: Any  # builtin types
    from_options: bool  # set by the options of a compile


def settings_as_acted(
    at_end: dict[str, SettingEntry], activity: TestActivity | None, body_threads: Collection[str]
) -> ActedSettings:
    """``at_end``: the settings read where the body ran, at its end; ``body_threads``: the names
    of the threads the body ran in."""
    moments = activity.moments if activity is not None else []
    seen = _values_by_key([m for m in moments if m.thread in body_threads])
    settings = dict(at_end)
    varied: dict[str, list[Any]] = {}
    for key, values in seen.items():
        end = at_end.get(key)
        if end is None:
            continue
        settings[key] = SettingEntry(values[0].value, _source(key, values[0], end))
        distinct = list({_identity(v.value): v.value for v in values}.values())
        if len(distinct) > 1:
            varied[key] = distinct
    changed = {
        key: end
        for key, end in at_end.items()
        if key in seen
        and settings[key].source != COMPILE_SOURCE
        and _identity(settings[key].value) != _identity(end.value)
    }
    return ActedSettings(settings, changed, varied)


def _values_by_key(moments: list[Moment]) -> dict[str, list[_Value]]:
    """Each key's values at the moments, in order. A key that a compile's options set is the
    compiles' alone: a recording or replay of that graph happens outside its options."""
    by_options = frozenset().union(*(m.options for m in moments))
    found: dict[str, list[_Value]] = {}
    for moment in moments:
        for key, value in moment.values.items():
            if moment.options or key not in by_options:
                found.setdefault(key, []).append(_Value(jsonable(value), key in moment.options))
    return found


def _source(key: str, first: _Value, end: SettingEntry) -> str:
    """Where the value torch acted under came from: a compile's options, the same source as at
    the end for the same value, else the default (or the variable that decided it), else the
    test."""
    if first.from_options:
        return COMPILE_SOURCE
    if _identity(first.value) == _identity(end.value):
        return end.source
    default = default_entry(key)
    if default is not None and _identity(default.value) == _identity(first.value):
        return default.source
    return TEST_SOURCE


def _identity(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)
