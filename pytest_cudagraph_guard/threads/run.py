"""``@pytest.mark.cudagraph_thread``: the test's call phase in fresh non-main threads."""

from __future__ import annotations

import contextvars
import functools
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest

from .. import _torch
from ..core import config_state
from ..core.diagnosis import THREAD_ERROR, TIMEOUT, DiagnoseHook, error_record, timeout_hint
from ..core.facts import ThreadRunFacts, thread_run_key
from ..core.markers import THREAD_MARKER, ThreadOptions
from ..core.outcomes import is_skip_or_xfail
from ..core.records import ErrorEntry, SettingEntry, error_entry
from ..core.settings import cudagraph_switches
from .launch import Placement, barrier

THREAD_NAME = "cudagraph-thread-{index}"
RELEASE_GRACE_S = 30.0
SHORT_TRACEBACK_ENDS = 2  # frames kept at each end of another thread's traceback


@contextmanager
def call_in_threads(
    item: pytest.Function,
    options: ThreadOptions,
    diagnose_hook: DiagnoseHook,
    settings_keys: list[str] | None = None,
) -> Iterator[None]:
    """For the duration of the call phase, makes ``item.obj`` run in the marker's threads.
    ``settings_keys``: the extra settings to read in the first thread (None: none are read)."""
    run = thread_runner(item, options, diagnose_hook, settings_keys)
    original = item.obj
    item.obj = _threaded(original, run)
    try:
        yield
    finally:
        item.obj = original


def thread_runner(
    item: pytest.Item,
    options: ThreadOptions,
    diagnose_hook: DiagnoseHook,
    settings_keys: list[str] | None,
) -> Callable[[Callable[[], Any]], None]:
    """A function that runs a body in the marker's threads, keeping the results for ``item``."""
    result = ThreadRunFacts(
        where=f"thread x {options.threads}",
        threads=thread_names(options.threads),
        switches=cudagraph_switches(options.trees) if options.switches else {},
    )
    item.stash[thread_run_key] = result

    def run(body: Callable[[], Any]) -> None:
        __tracebackhide__ = True
        ThreadRun(body, options, result, diagnose_hook, settings_keys).run()

    return run


@functools.cache
def thread_names(threads: int) -> tuple[str, ...]:
    return tuple(THREAD_NAME.format(index=i) for i in range(threads))


def _threaded(
    body: Callable[..., Any], run: Callable[[Callable[[], Any]], None]
) -> Callable[..., Any]:
    @functools.wraps(body)
    def threaded(*args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        run(functools.partial(body, *args, **kwargs))

    return threaded


class ThreadRun:
    """Runs ``body`` once in each of ``options.threads`` threads and turns what they raised into
    the test's outcome."""

    def __init__(
        self,
        body: Callable[[], Any],
        options: ThreadOptions,
        result: ThreadRunFacts,
        diagnose_hook: DiagnoseHook,
        settings_keys: list[str] | None = None,
    ) -> None:
        self.body = body
        self.options = options
        self.result = result
        self.diagnose_hook = diagnose_hook
        self.settings_keys = settings_keys  # None: nobody reports settings
        self.names = list(result.threads)
        self.errors: dict[str, BaseException] = {}
        self.barrier = barrier(options.threads)
        self.finished = barrier(options.threads)
        self.bodies_done: set[str] = set()
        self.placement = Placement()
        self.contexts: list[contextvars.Context] = []  # each thread's, as it left it

    def run(self) -> None:
        __tracebackhide__ = True
        if _torch.torch_loaded():  # else a suite option's torch-free test: nothing to ready
            _torch.import_cudagraph_trees()  # its module-level state belongs to the main thread
        switches = self.options.switches
        # From torch 2.12 the threads' overrides live and die in their own contexts.
        before = (
            config_state.Snapshot.take() if switches and _torch.config_is_process_wide() else None
        )
        if self.options.tls == "init":
            _torch.start_thread_readiness()
        try:
            stuck = self._run_threads(self._context_with_cudagraphs())
            if not switches:  # what the test changed is its own, as in the main thread
                _torch.adopt_thread_overrides(self.contexts)
            self._record_errors()  # while what tls="init" adds is in effect, for its hints
        finally:
            if self.options.tls == "init":
                _torch.stop_thread_readiness()
            if before is not None:
                config_state.restore(before, include_env=False)
        self._conclude(stuck)

    def _context_with_cudagraphs(self) -> contextvars.Context:
        context = contextvars.copy_context()
        if self.options.switches:  # else (a suite option) the threads see the main thread's
            context.run(_torch.apply_cudagraph_settings, self.options.trees)
        return context

    def _run_threads(self, context: contextvars.Context) -> list[threading.Thread]:
        threads = self._start_threads(context)
        deadline = time.monotonic() + self.options.timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t for t in threads if t.name not in self.bodies_done]
        if stuck:
            self.finished.abort()  # the others leave without releasing their state
            for thread in threads:  # no thread but a stuck one outlives the test
                if thread not in stuck:
                    thread.join(RELEASE_GRACE_S)
        return stuck

    def _start_threads(self, context: contextvars.Context) -> list[threading.Thread]:
        threads: list[threading.Thread] = []
        self.placement.pin()
        try:
            for index, name in enumerate(self.names):
                own = context if len(self.names) == 1 else context.copy()  # a run's is fresh
                self.contexts.append(own)
                thread = threading.Thread(
                    target=own.run, args=(self._thread_main, index), name=name, daemon=True
                )
                try:
                    thread.start()
                except BaseException as exc:
                    self.errors[name] = exc
                    self.barrier.abort()
                    self.finished.abort()
                    break
                threads.append(thread)
        finally:
            self.placement.unpin()
        return threads

    def _thread_main(self, index: int) -> None:
        name = self.names[index]
        self.placement.unpin()
        try:
            if self.options.tls == "init":
                _torch.ensure_cudagraph_tls()
            try:
                self.barrier.wait(self.options.timeout)
            except threading.BrokenBarrierError:
                return
            if index == 0 and self.settings_keys is not None:
                self.result.settings = _settings_here(self.settings_keys)
            self.body()
        except BaseException as exc:
            self.errors[name] = exc
        finally:
            self.bodies_done.add(name)
            self._release(name)

    def _release(self, name: str) -> None:
        """Frees this thread's tree managers once every thread is done with the device:
        resetting them turns torch's process-wide cached-tensor switch off."""
        try:
            self.finished.wait(self.options.timeout)
        except threading.BrokenBarrierError:
            return
        try:
            _torch.release_cudagraph_tls()
        except Exception as exc:
            self.errors.setdefault(name, exc)

    def _record_errors(self) -> None:
        for name in self.names:  # a skip or xfail is the test's outcome, not an error
            if name in self.errors and not is_skip_or_xfail(self.errors[name]):
                self.result.errors.append(error_record(self.errors[name], name, self.diagnose_hook))

    def _conclude(self, stuck: list[threading.Thread]) -> None:
        __tracebackhide__ = True
        if not (self.errors or stuck):
            return
        if stuck:
            self._fail_timeout(stuck)
        failures = [
            (name, self.errors[name])
            for name in self.names
            if name in self.errors and not is_skip_or_xfail(self.errors[name])
        ]
        if failures:
            _raise_failures(failures, self.result.errors, len(self.names))
        for outcome in (pytest.xfail.Exception, pytest.skip.Exception):
            for exc in self.errors.values():
                if isinstance(exc, outcome):
                    raise exc

    def _fail_timeout(self, stuck: list[threading.Thread]) -> None:
        timeout = self.options.timeout
        frames = sys._current_frames()
        lines = [
            f"{THREAD_MARKER}: {len(stuck)} of {len(self.names)} threads still running "
            f"after {timeout:g} s"
        ]
        for thread in stuck:
            self.result.errors.append(_timeout_record(thread.name, timeout))
            stack = _stack_of(frames.get(thread.ident or -1))
            lines.append(f"\nThread {thread.name} (still running), most recent call last:")
            lines.append(stack.rstrip())
        for name, exc in self.errors.items():
            lines.append(f"\nThread {name} raised {type(exc).__name__}: {exc}")
        pytest.fail("\n".join(lines), pytrace=False)


def _settings_here(extra_keys: list[str]) -> dict[str, SettingEntry]:
    from ..core.settings import effective_settings, settings_record

    return settings_record(effective_settings(extra_keys))


def _stack_of(frame: FrameType | None) -> str:
    """The stack of a running thread, from the test's code on (not the thread machinery)."""
    if frame is None:
        return "  (no stack)"
    entries = traceback.extract_stack(frame)
    ours = (threading.__file__, __file__)
    while entries and entries[0].filename in ours:
        entries.pop(0)
    return "".join(traceback.format_list(entries)).rstrip()


def _timeout_record(thread_name: str, timeout: float) -> ErrorEntry:
    message = f"still running after {timeout:g} s"
    return error_entry(thread_name, "Timeout", message, kind=TIMEOUT, hint=timeout_hint(timeout))


def _raise_failures(
    failures: list[tuple[str, BaseException]], records: list[ErrorEntry], threads: int
) -> None:
    """Raises the first thread's failure, naming every thread that failed alike; each other way
    the threads failed follows once, as a note with its own short traceback."""
    __tracebackhide__ = True
    by_thread = {record["thread"]: record for record in records}
    (names, first), *others = _alike(failures)
    notes = [f"{_who(names, threads)} raised this", *_diagnosis_lines(by_thread.get(names[0]))]
    if others:
        ways = f"{len(others) + 1} different ways"
        notes.insert(0, f"{THREAD_MARKER}: {len(failures)} of {threads} threads failed, {ways}")
    for other_names, other in others:
        notes += ["", f"{_who(other_names, threads)} raised, differently:", _short(other)]
        notes += _diagnosis_lines(by_thread.get(other_names[0]))
    first.__notes__ = [*getattr(first, "__notes__", []), *notes]
    raise first


def _diagnosis_lines(record: ErrorEntry | None) -> list[str]:
    if record is None or record["kind"] in (None, THREAD_ERROR):
        return []
    return [f"kind: {record['kind']}", f"hint: {record['hint']}"]


def _short(exc: BaseException) -> str:
    """``exc``'s traceback from the test's code on, as Python prints it."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename not in (__file__, threading.__file__)
    ]
    if len(frames) > SHORT_TRACEBACK_ENDS * 2:
        skipped = len(frames) - SHORT_TRACEBACK_ENDS * 2
        lines = [
            *traceback.format_list(frames[:SHORT_TRACEBACK_ENDS]),
            f"  ... {skipped} more frames ...\n",
            *traceback.format_list(frames[-SHORT_TRACEBACK_ENDS:]),
        ]
    else:
        lines = traceback.format_list(frames)
    return "".join(lines + traceback.format_exception_only(exc)).rstrip()


def _alike(failures: list[tuple[str, BaseException]]) -> list[tuple[list[str], BaseException]]:
    """The failures grouped by type, message and the lines they went through, in thread order;
    each group keeps its first exception."""
    groups: dict[tuple[Any, ...], tuple[list[str], BaseException]] = {}
    for name, exc in failures:
        names, _ = groups.setdefault(_signature(exc), ([], exc))
        names.append(name)
    return list(groups.values())


def _signature(exc: BaseException) -> tuple[Any, ...]:
    """What makes two failures alike: type, message, and where they began and ended. The
    frames between may differ, since each thread may run code that torch generated for it."""
    frames = traceback.extract_tb(exc.__traceback__)
    ends = [(f.filename, f.lineno) for f in (frames[:1] + frames[-1:])]
    return (type(exc), str(exc), *ends)


def _who(names: list[str], threads: int) -> str:
    if len(names) == 1:
        return f"[{names[0]}]"
    return f"[{len(names)} of {threads} threads: {', '.join(names)}]"
