"""What torch did with CUDA graphs while one test ran, in any thread, as the report's
``Activity`` record, and the compiles whose cudagraph settings differ from the main thread's."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from .. import _torch
from ..core.diagnosis import CONFIG_DIVERGENCE
from ..core.records import (
    Activity,
    CompiledEntry,
    ErrorEntry,
    SkipEntry,
    ThreadActivity,
    activity_record,
    error_entry,
)
from ..core.settings import jsonable


class Compile(NamedTuple):
    """One torch.compile seen: its thread, its options, and the thread's settings then."""

    thread: str
    options: dict[str, Any]
    settings: dict[str, Any]

    def effective(self, key: str) -> Any:
        return self.options.get(key, self.settings.get(key))

    def wants_cudagraphs(self) -> bool:
        return bool(self.effective("triton.cudagraphs"))


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

    def add(self, event: str, data: dict[str, Any]) -> None:
        """One event of torch's, as the observer of :mod:`.._torch` reports it."""
        thread = data["thread"]
        if event == "compile":
            self.compiled.append(Compile(thread, data["options"], data["settings"]))
        elif event == "cudagraphify":
            self.cudagraphified[thread] += 1
        elif event == "recorded":
            self.recorded[thread] += 1
        elif event == "replay":
            self.replays[thread] += 1
        elif event == "skip":
            self.skips.append(SkipEntry(thread=thread, reason=data["reason"]))

    def finish(self) -> None:
        self.skip_counter = _torch.skip_count() - self.skips_at_start

    def happened(self) -> bool:
        return bool(self.cudagraphified or self.recorded or self.replays or self.skips) or any(
            c.wants_cudagraphs() for c in self.compiled
        )

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
            if thread == main:
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
    return CompiledEntry(
        thread=compiled.thread,
        options=jsonable(compiled.options),
        cudagraphs=compiled.wants_cudagraphs(),
        trees=compiled.effective("triton.cudagraph_trees"),
    )


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
