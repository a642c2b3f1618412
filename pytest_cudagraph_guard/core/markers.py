"""The plugin's markers: their names and documentation, which of them a test carries
(:func:`plugin_marks`, read by ``plugin.py``, the features and the report), and what they ask
for, every check made, once per test (:func:`checked_marks`, read where a marked test is set up
or run: ``plugin.py``, ``threads.run``, ``isolation``). Also the one rule for the name of an
environment variable that the plugin sets in a test process (a marker's ``env``, read by
:mod:`.options` for ini ``cudagraph_process_env`` too)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Final, NamedTuple

import pytest

from .stash import applied_by_key

THREAD_MARKER: Final = "cudagraph_thread"
SUBPROCESS_MARKER: Final = "cudagraph_subprocess"
MAIN_THREAD_MARKER: Final = "cudagraph_main_thread"
TLS_MODES: Final = ("native", "init")
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_NAME_RULE: Final = "letters, digits and _, not starting with a digit"

THREAD_MARKER_DOC: Final = (
    f"{THREAD_MARKER}(threads=1, *, timeout=60.0, trees=True, tls='native', "
    "require_cuda=False): run the test's call phase in `threads` fresh non-main threads "
    "(cudagraph-thread-0, ...) released together, each in a copy of the main thread's context, "
    "with triton.cudagraphs=True and triton.cudagraph_trees=`trees`. tls='init' readies "
    "CUDAGraph Trees in each thread and, on torch < 2.13, serializes warm-up and capture as "
    "torch 2.13 does; 'native' leaves torch as it is. Threads still running after `timeout` "
    "seconds fail the test. require_cuda=True skips the test without a CUDA device."
)


SUBPROCESS_MARKER_DOC: Final = (
    f"{SUBPROCESS_MARKER}(*, timeout=300.0, trees=True, env=None, require_cuda=False, "
    "gpus=None): run the whole test (setup, call, teardown) in a fresh Python process that "
    "never initialised CUDA, with triton.cudagraphs=True, triton.cudagraph_trees=`trees` and "
    "the variables of the str->str mapping `env` set; its outcome, output and report are the "
    "test's. A process that dies fails the test with its signal or exit code; one still "
    "running `timeout` seconds after its test began (its start and collection: 120 s or the "
    "timeout, where longer) is killed with its process group. require_cuda=True skips "
    "the test without a CUDA device. gpus=K gives the process K GPUs of the host "
    "(CUDA_VISIBLE_DEVICES), and skips the test where the host has fewer."
)


MAIN_THREAD_MARKER_DOC: Final = (
    f"{MAIN_THREAD_MARKER}: run the test in the session's own main thread and process, "
    "whatever --cudagraph-threads and --cudagraph-subprocess say (for tests that must, e.g. "
    "signal handlers)."
)


class MarkerError(Exception):
    """A marker argument that is not valid; the message names the marker and the argument."""


class ThreadOptions(NamedTuple):
    threads: int = 1
    timeout: float = 60.0
    trees: bool = True
    tls: str = "native"
    require_cuda: bool = False
    # Not an argument: whether the threads turn CUDA graphs on (a marker of the test's own does,
    # one that --cudagraph-threads applied does not: the threads see the main thread's config).
    switches: bool = True


class SubprocessOptions(NamedTuple):
    timeout: float = 300.0
    trees: bool = True
    env: tuple[tuple[str, str], ...] = ()
    require_cuda: bool = False
    gpus: int | None = None  # the GPUs the test's process needs; None: whatever it is given
    # Not an argument: whether the test process turns CUDA graphs on (a marker of the test's own
    # does, one that --cudagraph-subprocess applied does only under --cudagraph-on).
    switches: bool = True


class PluginMarks(NamedTuple):
    """The plugin's markers on one test: the closest of each marker that moves it (pytest's
    rule, as ``get_closest_marker``), and every ``cudagraph_main_thread``, the closest first."""

    thread: pytest.Mark | None
    process: pytest.Mark | None
    main_thread: tuple[pytest.Mark, ...]


class CheckedMarks(NamedTuple):
    """What a test's markers ask for, checked: the options of each marker (None: no such marker,
    or a bad one), and the first error (``cudagraph_main_thread``'s misuse, which leaves no
    options, then the thread marker's, then the subprocess marker's), naming the test, the
    marker and the argument."""

    thread: ThreadOptions | None
    process: SubprocessOptions | None
    error: str | None
    applied_by: str | None  # the suite option that applied the marker; None: the test's own


_marks_key = pytest.StashKey[PluginMarks]()
_checked_key = pytest.StashKey[CheckedMarks]()


def plugin_marks(item: pytest.Item) -> PluginMarks:
    """The item's markers of the plugin, looked up once per test (after collection hooks may
    have added them), in one walk over its nodes, the closest first."""
    marks = item.stash.get(_marks_key, None)
    if marks is None:
        closest: dict[str, pytest.Mark] = {}
        main_thread: list[pytest.Mark] = []
        for node in reversed(item.listchain()):
            for mark in node.own_markers:
                if mark.name in (THREAD_MARKER, SUBPROCESS_MARKER):
                    closest.setdefault(mark.name, mark)
                elif mark.name == MAIN_THREAD_MARKER:
                    main_thread.append(mark)
        marks = PluginMarks(
            closest.get(THREAD_MARKER), closest.get(SUBPROCESS_MARKER), tuple(main_thread)
        )
        item.stash[_marks_key] = marks
    return marks


def thread_marker_asked(item: pytest.Item) -> str | None:
    """How the test asked to run in the thread marker's threads, if it did."""
    return _asked(item, plugin_marks(item).thread, THREAD_MARKER)


def subprocess_marker_asked(item: pytest.Item) -> str | None:
    """How the test asked to run in a process of its own, if it did."""
    return _asked(item, plugin_marks(item).process, SUBPROCESS_MARKER)


def marker_asked(item: pytest.Item) -> str | None:
    return thread_marker_asked(item) or subprocess_marker_asked(item)


def _asked(item: pytest.Item, mark: pytest.Mark | None, marker: str) -> str | None:
    if mark is None:
        return None
    return item.stash.get(applied_by_key, None) or f"@pytest.mark.{marker}"


def checked_marks(
    item: pytest.Item,
    default_timeout: float | None,
    cudagraphs_on: bool = False,
    *,
    torch_installed: Callable[[], bool] = lambda: True,
) -> CheckedMarks:
    """The test's :class:`CheckedMarks`, made once. ``default_timeout``: ``--cudagraph-timeout``,
    where a marker gives none; ``cudagraphs_on``: ``--cudagraph-on``. Markers that a suite option
    applied switch CUDA graphs on only under ``--cudagraph-on`` (threads never: they see the main
    thread's config), and without torch (``torch_installed``, asked only then) their threads
    have nothing to ready."""
    checked = item.stash.get(_checked_key, None)
    if checked is not None:
        return checked
    marks = plugin_marks(item)
    applied = item.stash.get(applied_by_key, None)
    errors: list[str] = []
    thread = process = None
    misuse = _main_thread_misuse(marks)
    if misuse is not None:
        errors.append(describe_error(item.nodeid, MAIN_THREAD_MARKER, misuse))
    else:
        try:
            if marks.thread is not None:
                thread = thread_options(marks.thread, default_timeout, switches=applied is None)
                if applied is not None and not torch_installed():
                    thread = thread._replace(tls="native")
        except MarkerError as error:
            errors.append(describe_error(item.nodeid, THREAD_MARKER, error))
        try:
            if marks.process is not None:
                switches = cudagraphs_on or applied is None
                process = subprocess_options(marks.process, default_timeout, switches=switches)
        except MarkerError as error:
            errors.append(describe_error(item.nodeid, SUBPROCESS_MARKER, error))
    checked = CheckedMarks(thread, process, errors[0] if errors else None, applied)
    item.stash[_checked_key] = checked
    return checked


def describe_error(nodeid: str, marker: str, error: MarkerError) -> str:
    return f"{nodeid}: @pytest.mark.{marker}: {error}"


def thread_options(
    mark: pytest.Mark, default_timeout: float | None = None, *, switches: bool = True
) -> ThreadOptions:
    """The validated arguments of a ``cudagraph_thread`` marker."""
    given = _bind(mark, ThreadOptions, ("threads",), default_timeout)
    return ThreadOptions(
        threads=_positive_int(given["threads"], "threads"),
        timeout=_positive_number(given["timeout"], "timeout"),
        trees=_bool(given["trees"], "trees"),
        require_cuda=_bool(given["require_cuda"], "require_cuda"),
        tls=_tls(given["tls"]),
        switches=switches,
    )


def subprocess_options(
    mark: pytest.Mark, default_timeout: float | None = None, *, switches: bool = True
) -> SubprocessOptions:
    """The validated arguments of a ``cudagraph_subprocess`` marker."""
    given = _bind(mark, SubprocessOptions, (), default_timeout)
    gpus = given["gpus"]
    return SubprocessOptions(
        env=_env(mark.kwargs.get("env")),  # keyword-only: its default, (), is no valid input
        timeout=_positive_number(given["timeout"], "timeout"),
        trees=_bool(given["trees"], "trees"),
        require_cuda=_bool(given["require_cuda"], "require_cuda"),
        gpus=None if gpus is None else _positive_int(gpus, "gpus"),
        switches=switches,
    )


def _main_thread_misuse(marks: PluginMarks) -> MarkerError | None:
    """A ``cudagraph_main_thread`` marker used wrongly: it takes no arguments, and it cannot
    share a test with the markers that move the test out of the main thread."""
    if not marks.main_thread:
        return None
    for mark in marks.main_thread:
        if mark.args or mark.kwargs:
            given = [repr(a) for a in mark.args] + [f"{k}={v!r}" for k, v in mark.kwargs.items()]
            return MarkerError(f"takes no arguments, got {', '.join(given)}")
    others = [
        f"@pytest.mark.{name}"
        for name, mark in ((THREAD_MARKER, marks.thread), (SUBPROCESS_MARKER, marks.process))
        if mark is not None
    ]
    if not others:
        return None
    return MarkerError(
        f"cannot be combined with {' and '.join(others)} on one test: the test runs either in "
        "the main thread or out of it; remove one of them"
    )


def _bind(
    mark: pytest.Mark,
    options: type[ThreadOptions | SubprocessOptions],
    positional: tuple[str, ...],
    default_timeout: float | None,
) -> dict[str, object]:
    """Each argument of ``options`` (less ``switches``, which is no argument) as ``mark`` gives
    it, else its default (``default_timeout``, where given, for the timeout)."""
    names = options._fields[:-1]
    if len(mark.args) > len(positional):
        extra = mark.args[len(positional)]
        takes = (
            f"takes only {', '.join(positional)} as a positional argument"
            if positional
            else "takes keyword arguments only"
        )
        raise MarkerError(f"{takes}, got {extra!r}: {_keyword_hint(extra, names)}")
    values: dict[str, object] = dict(zip(positional[: len(mark.args)], mark.args, strict=True))
    for key, value in mark.kwargs.items():
        if key not in names:
            raise MarkerError(f"unknown argument {key!r} (known: {', '.join(names)})")
        if key in values:
            raise MarkerError(f"argument {key!r} given twice")
        values[key] = value
    if default_timeout is not None:
        values.setdefault("timeout", default_timeout)
    return {**options._field_defaults, **values}


def _keyword_hint(value: object, names: tuple[str, ...]) -> str:
    """Which keyword a stray positional value most likely meant."""
    if isinstance(value, bool):
        guess = "trees"
    elif isinstance(value, (int, float)):
        guess = "timeout"
    elif isinstance(value, str) and value in TLS_MODES:
        guess = "tls"
    elif isinstance(value, Mapping):
        guess = "env"
    else:
        return f"pass it by keyword ({', '.join(names)})"
    return f"pass it by keyword, e.g. {guess}={value!r}"


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MarkerError(f"argument {name!r} must be a positive int, got {value!r}")
    return value


def _positive_number(value: object, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise MarkerError(f"argument {name!r} must be a positive number, got {value!r}")
    return value


def _bool(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise MarkerError(f"argument {name!r} must be True or False, got {value!r}")
    return value


def _tls(value: object) -> str:
    if not isinstance(value, str) or value not in TLS_MODES:
        raise MarkerError(f"argument 'tls' must be 'native' or 'init', got {value!r}")
    return value


def _env(value: object) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise MarkerError(f"argument 'env' must be a str->str mapping, got {value!r}")
    for key, item in value.items():
        if not (isinstance(key, str) and isinstance(item, str) and "\0" not in item):
            raise MarkerError(
                f"argument 'env' must be a str->str mapping of variable names to values, "
                f"got the item {key!r}: {item!r}"
            )
        if not is_env_name(key):
            raise MarkerError(f"argument 'env': {key!r} is not a variable name ({ENV_NAME_RULE})")
    return tuple(sorted(value.items()))


def is_env_name(name: object) -> bool:
    return isinstance(name, str) and ENV_NAME.fullmatch(name) is not None
