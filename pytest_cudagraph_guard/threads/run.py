"""``@pytest.mark.cudagraph_thread``: the test's call phase in fresh non-main threads, run for
:mod:`.plugin`.

What every marked test of a session shares is found once (``ThreadSession``); per test, only what
the marker's arguments ask for is done. Code of ours that fails around the test's body is noted
once and turned off for the session, and the body runs as it would without it; where the marker
cannot be honoured (its threads cannot be readied as asked), the test fails saying that the plugin
failed, not the test. Also the wait until a joined thread's OS thread has ended.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from types import FrameType
from typing import TYPE_CHECKING, Any, Final, NoReturn

import pytest

from .._torch import faults, runtime
from ..core.entries import ErrorEntry, SettingEntry
from ..core.kinds import TIMEOUT
from ..core.markers import THREAD_MARKER, ThreadOptions, checked_marks
from ..core.outcomes import is_skip_or_xfail
from ..core.stash import ThreadRunFacts, thread_run_key
from ..diagnosis import DiagnoseHook, error_record, hook_diagnoser, timeout_hint
from ..guard.diff import restore as restore_config
from ..guard.state import Snapshot
from ..torch_settings import SettingsReader, switched
from .failures import raise_failures, where_the_test_is
from .placement import Placement, barrier

if TYPE_CHECKING:
    from ..core.session import PluginSession

THREAD_NAME: Final = "cudagraph-thread-{index}"
RELEASE_GRACE_S: Final = 30.0

TREES_IMPORT_LOSS: Final = faults.Loss(
    THREAD_MARKER, "CUDAGraph Trees imported in the main thread before the threads run"
)
SETTINGS_LOSS: Final = faults.Loss(
    THREAD_MARKER, "settings read in the first thread (the report reads them in the main thread)"
)
RELEASE_LOSS: Final = faults.Loss(THREAD_MARKER, "each thread's CUDAGraph Trees state freed")
READINESS_LOSS: Final = faults.Loss(THREAD_MARKER, "what tls='init' adds to torch undone")
RESTORE_LOSS: Final = faults.Loss(THREAD_MARKER, "config that the threads set restored")
EXIT_LOSS: Final = faults.Loss(
    THREAD_MARKER, "the test goes on once its threads' OS threads have ended, not before"
)
JOIN_WAITS_FOR_THE_OS_THREAD: Final = sys.version_info >= (3, 13)
TASK_PATH: Final = "/proc/self/task/{}"
EXIT_GRACE_S: Final = 2.0  # a thread id reused at once by a new thread costs at most this
FIRST_PAUSE_S: Final = 0.00005
LONGEST_PAUSE_S: Final = 0.001
PLUGIN_FAILURE: Final = (
    "This is a failure of pytest-cudagraph-guard, not of the test; please report it with "
    "this traceback:"
)

Body = Callable[[], Any]


class ThreadSession:
    """What every marked test of a session runs with, found once (``settings_keys`` None: nobody
    reports settings)."""

    def __init__(self, session: PluginSession) -> None:
        self.settings_keys = session.settings_keys() if session.recording else None
        self.default_timeout = session.options.timeout
        self.diagnose_hook: DiagnoseHook = hook_diagnoser(session.config)
        self.placement = Placement()
        self._settings = SettingsReader()
        self._trees_imported = False

    def call(
        self,
        item: pytest.Item,
        mark: pytest.Mark,
        body: Callable[..., Any],
        /,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        """``body(*args, **kwargs)`` in the marker's threads: what ``item.obj`` is in the call."""
        __tracebackhide__ = True
        self.run(item, mark, functools.partial(body, *args, **kwargs))

    def run(self, item: pytest.Item, mark: pytest.Mark, body: Body) -> None:
        """``body()`` in the marker's threads, for ``item``."""
        __tracebackhide__ = True
        options = checked_marks(item, self.default_timeout).thread
        assert options is not None  # its set-up checked them
        result = new_facts(options)
        item.stash[thread_run_key] = result
        if not self._trees_imported:  # its module-level state belongs to the main thread
            self._trees_imported = True
            faults.run_ours(TREES_IMPORT_LOSS, _import_trees_where_installed)
        ThreadRun(body, options, result, self).run()

    def settings_here(self) -> dict[str, SettingEntry] | None:
        """The report's settings as the calling thread sees them; None where nobody reports
        them, or where reading them failed (noted once; the report reads them elsewhere)."""
        if self.settings_keys is None:
            return None
        return faults.run_ours(SETTINGS_LOSS, _settings_here, self._settings, self.settings_keys)

    def release_thread_state(self) -> None:
        from .._torch import trees

        faults.run_ours(RELEASE_LOSS, trees.release_cudagraph_tls)


def new_facts(options: ThreadOptions) -> ThreadRunFacts:
    where, names = _run_names(options.threads)
    return ThreadRunFacts(where=where, threads=names, switches=switched(options))


@functools.cache
def _run_names(threads: int) -> tuple[str, tuple[str, ...]]:
    """The place the report shows, and the threads' names."""
    return f"thread x {threads}", tuple(THREAD_NAME.format(index=i) for i in range(threads))


class ThreadRun:
    """Runs ``body`` once in each of ``options.threads`` threads and turns what they raised into
    the test's outcome."""

    def __init__(
        self, body: Body, options: ThreadOptions, result: ThreadRunFacts, session: ThreadSession
    ) -> None:
        self.body = body
        self.options = options
        self.result = result
        self.session = session
        self.names = result.threads
        self.errors: dict[str, BaseException] = {}
        self.barrier = barrier(options.threads)
        self.finished = barrier(options.threads)
        self.bodies_done: set[str] = set()
        self.placement = session.placement
        self.readied = False  # tls="init" applied to torch
        self.before: Snapshot | None = None  # torch <= 2.11: config to restore
        self.contexts: list[contextvars.Context] = []  # each thread's, as it left it

    def run(self) -> None:
        __tracebackhide__ = True
        try:
            context = self._prepare()
            stuck = self._run_threads(context)
            if not self.options.switches:  # what the test changed is its own, as in the main thread
                from .._torch import cudagraph_settings

                cudagraph_settings.adopt_thread_overrides(self.contexts)
            self._record_errors()  # while what tls="init" adds is in effect, for its hints
        finally:
            self._clean_up()
        self._conclude(stuck)

    def _prepare(self) -> contextvars.Context:
        """What the marker promises its threads (else :func:`fail_as_ours`)."""
        __tracebackhide__ = True
        from .._torch import cudagraph_settings

        try:
            # From torch 2.12 the threads' overrides live and die in their own contexts.
            if self.options.switches and cudagraph_settings.config_is_process_wide():
                self.before = Snapshot.take()
            if self.options.tls == "init":
                from .._torch import trees

                trees.start_thread_readiness()
                self.readied = True
            return self._context_with_cudagraphs()
        except runtime.TorchNotInstalled:
            raise
        except Exception as exc:
            fail_as_ours("could not prepare the threads", exc)

    def _clean_up(self) -> None:
        if self.readied:
            from .._torch import trees

            faults.run_ours(READINESS_LOSS, trees.stop_thread_readiness)
        if self.before is not None:
            restore = functools.partial(restore_config, include_env=False)
            faults.run_ours(RESTORE_LOSS, restore, self.before)

    def _context_with_cudagraphs(self) -> contextvars.Context:
        context = contextvars.copy_context()
        if self.options.switches:  # else (a suite option) the threads see the main thread's
            from .._torch import cudagraph_settings

            context.run(cudagraph_settings.apply_cudagraph_settings, self.options.trees)
        return context

    def _run_threads(self, context: contextvars.Context) -> list[threading.Thread]:
        threads = self._start_threads(context)
        self._join(threads, time.monotonic() + self.options.timeout)
        stuck = [t for t in threads if t.name not in self.bodies_done]
        if stuck:
            self.finished.abort()  # the others leave without releasing their state
            for thread in threads:  # no thread but a stuck one outlives the test
                if thread not in stuck:
                    thread.join(RELEASE_GRACE_S)
        faults.run_ours(EXIT_LOSS, wait_until_exited, threads)
        return stuck

    def _join(self, threads: list[threading.Thread], deadline: float) -> None:
        """Waits for the threads until ``deadline``. Failed meanwhile by pytest-timeout's signal,
        the main thread fails as if from where the first thread still in the test's body is:
        the failure reads in the test's code, not in ours or ``threading``'s. (Ctrl-C keeps its
        own traceback.)"""
        __tracebackhide__ = True
        try:
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        except pytest.fail.Exception as failed:
            # Not is_alive(): Python 3.11 marks a thread stopped when a join of it is
            # interrupted. A thread with frames in the body is running.
            for thread in threads:
                where = where_the_test_is(thread, ThreadRun._thread_main.__code__)
                if where is not None:
                    raise failed.with_traceback(where) from None
            raise

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
                self._ready_this_thread()
            try:
                self.barrier.wait(self.options.timeout)
            except threading.BrokenBarrierError:
                return
            if index == 0:
                self.result.settings = self.session.settings_here()
            self.body()
        except BaseException as exc:
            self.errors[name] = exc
        finally:
            self.bodies_done.add(name)
            self._release()

    def _ready_this_thread(self) -> None:
        """``ensure_cudagraph_tls()``, which the test asked for; where it fails, no thread runs
        the body and the test fails saying the plugin did."""
        from .._torch import trees

        try:
            trees.ensure_cudagraph_tls()
        except Exception as exc:
            self.barrier.abort()
            fail_as_ours("tls='init' could not ready CUDAGraph Trees in this thread", exc)

    def _release(self) -> None:
        """Frees this thread's tree managers once every thread is done with the device:
        resetting them turns torch's process-wide cached-tensor switch off."""
        try:
            self.finished.wait(self.options.timeout)
        except threading.BrokenBarrierError:
            return
        self.session.release_thread_state()

    def _failures(self) -> list[tuple[str, BaseException]]:
        """What each thread raised, in thread order; a skip or xfail is the test's outcome, not
        an error."""
        raised = [(name, self.errors[name]) for name in self.names if name in self.errors]
        return [(name, exc) for name, exc in raised if not is_skip_or_xfail(exc)]

    def _record_errors(self) -> None:
        hook = self.session.diagnose_hook
        self.result.errors += [error_record(exc, name, hook) for name, exc in self._failures()]

    def _conclude(self, stuck: list[threading.Thread]) -> None:
        __tracebackhide__ = True
        if not (self.errors or stuck):
            return
        if stuck:
            self._fail_timeout(stuck)
        if failures := self._failures():
            raise_failures(failures, self.result.errors, len(self.names))
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


def _import_trees_where_installed() -> None:
    from .._torch import trees

    with contextlib.suppress(runtime.TorchNotInstalled):
        trees.import_cudagraph_trees()


def _settings_here(reader: SettingsReader, keys: list[str]) -> dict[str, SettingEntry]:
    return reader.read(keys)


def fail_as_ours(what: str, error: BaseException) -> NoReturn:
    """Fails the test for a failure of the plugin's own code, saying so."""
    __tracebackhide__ = True
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    message = f"{THREAD_MARKER}: {what}: {type(error).__name__}: {error}"
    raise pytest.fail.Exception(f"{message}\n{PLUGIN_FAILURE}\n{trace}", pytrace=False) from error


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
    return ErrorEntry(thread_name, "Timeout", message, kind=TIMEOUT, hint=timeout_hint(timeout))


def wait_until_exited(threads: Iterable[threading.Thread]) -> None:
    """Returns once each ended thread is gone from the kernel's list of this process's threads,
    or after ``EXIT_GRACE_S``; at once where ``join()`` waited for that already or the OS has no
    such list.

    ``Thread.join()`` returns (on Python 3.12 and older) once the thread's Python state is freed;
    the OS thread then still runs its C++ thread-local destructors. From 3.13 ``join()`` joins the
    OS thread itself. Torch 2.11's (the compile and CUDA-graph state of a thread that compiled)
    overlapping the main thread's next steps left the process to crash later in a garbage
    collection (seen on the H200, with and without the plugin)."""
    if JOIN_WAITS_FOR_THE_OS_THREAD or not sys.platform.startswith("linux"):
        return
    deadline = time.monotonic() + EXIT_GRACE_S
    for thread in threads:
        if thread.native_id is not None and not thread.is_alive():
            _wait_for_task(TASK_PATH.format(thread.native_id), deadline)


def _wait_for_task(task: str, deadline: float) -> None:
    pause = FIRST_PAUSE_S
    while os.path.exists(task) and time.monotonic() < deadline:
        time.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE_S)
