"""The arguments of the plugin's markers: checked, into typed options, with one message that
names the marker and the argument for a bad one. Read by ``plugin.py`` and by the features
that run marked tests (``threads.run``, ``isolation``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

import pytest

from .env_names import ENV_NAME_RULE, is_env_name
from .markers import (
    MAIN_THREAD_MARKER,
    SUBPROCESS_MARKER,
    THREAD_MARKER,
    TLS_MODES,
    MarkerError,
    applied_by_option,
    main_thread_marks,
    plugin_marks,
)


class ThreadOptions(NamedTuple):
    threads: int = 1
    timeout: float = 60.0
    trees: bool = True
    tls: str = "native"
    require_cuda: bool = False
    # Not an argument: whether the threads turn CUDA graphs on (a marker of the test's own does,
    # one that --cudagraph-threads applied does not: the threads see the main thread's config).
    switches: bool = True


THREAD_ARGUMENTS: Final = ThreadOptions._fields[:-1]


def thread_options(
    mark: pytest.Mark, default_timeout: float | None = None, *, switches: bool = True
) -> ThreadOptions:
    """The validated arguments of a ``cudagraph_thread`` marker; ``default_timeout`` (from
    ``--cudagraph-timeout``) where the marker gives none."""
    values = _bind(mark, THREAD_ARGUMENTS, positional=("threads",))
    if default_timeout is not None:
        values.setdefault("timeout", default_timeout)
    options = ThreadOptions(**values, switches=switches)
    _check_positive_int(options.threads, "threads")
    _check_positive_number(options.timeout, "timeout")
    _check_bool(options.trees, "trees")
    _check_bool(options.require_cuda, "require_cuda")
    if options.tls not in TLS_MODES:
        raise MarkerError(f"argument 'tls' must be 'native' or 'init', got {options.tls!r}")
    return options


_thread_options_key = pytest.StashKey[ThreadOptions]()


def item_thread_options(
    item: pytest.Item,
    mark: pytest.Mark,
    default_timeout: float | None,
    *,
    torch_installed: bool = True,
) -> ThreadOptions:
    """``thread_options`` of the test's marker, read once per test: its set-up checks them (and
    says whether torch is installed), its call phase runs with them. Threads that a suite
    option applied switch nothing, and without torch they have nothing to ready."""
    options = item.stash.get(_thread_options_key, None)
    if options is None:
        applied = applied_by_option(item) is not None
        options = thread_options(mark, default_timeout, switches=not applied)
        if applied and not torch_installed:
            options = options._replace(tls="native")
        item.stash[_thread_options_key] = options
    return options


class SubprocessOptions(NamedTuple):
    timeout: float = 300.0
    trees: bool = True
    env: tuple[tuple[str, str], ...] = ()
    require_cuda: bool = False
    # Not an argument: whether the test process turns CUDA graphs on (a marker of the test's own
    # does, one that --cudagraph-subprocess applied does only under --cudagraph-on).
    switches: bool = True


SUBPROCESS_ARGUMENTS: Final = SubprocessOptions._fields[:-1]


def subprocess_options(
    mark: pytest.Mark, default_timeout: float | None = None, *, switches: bool = True
) -> SubprocessOptions:
    """The validated arguments of a ``cudagraph_subprocess`` marker; ``default_timeout`` (from
    ``--cudagraph-timeout``) where the marker gives none."""
    values = _bind(mark, SUBPROCESS_ARGUMENTS, positional=())
    if default_timeout is not None:
        values.setdefault("timeout", default_timeout)
    env = values.pop("env", None)
    options = SubprocessOptions(**values, env=_check_env(env), switches=switches)
    _check_positive_number(options.timeout, "timeout")
    _check_bool(options.trees, "trees")
    _check_bool(options.require_cuda, "require_cuda")
    return options


def item_subprocess_options(
    item: pytest.Item, mark: pytest.Mark, default_timeout: float | None, cudagraphs_on: bool
) -> SubprocessOptions:
    """``subprocess_options`` of the test's marker; ``cudagraphs_on``: ``--cudagraph-on``."""
    switches = cudagraphs_on or applied_by_option(item) is None
    return subprocess_options(mark, default_timeout, switches=switches)


def describe_error(nodeid: str, marker: str, error: MarkerError) -> str:
    return f"{nodeid}: @pytest.mark.{marker}: {error}"


def _bind(mark: pytest.Mark, names: tuple[str, ...], positional: tuple[str, ...]) -> dict[str, Any]:
    if len(mark.args) > len(positional):
        extra = mark.args[len(positional)]
        takes = (
            f"takes only {', '.join(positional)} as a positional argument"
            if positional
            else "takes keyword arguments only"
        )
        raise MarkerError(f"{takes}, got {extra!r}: {_keyword_hint(extra, names)}")
    values = dict(zip(positional[: len(mark.args)], mark.args, strict=True))
    for key, value in mark.kwargs.items():
        if key not in names:
            raise MarkerError(f"unknown argument {key!r} (known: {', '.join(names)})")
        if key in values:
            raise MarkerError(f"argument {key!r} given twice")
        values[key] = value
    return values


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


def _check_positive_int(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MarkerError(f"argument {name!r} must be a positive int, got {value!r}")


def _check_positive_number(value: object, name: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise MarkerError(f"argument {name!r} must be a positive number, got {value!r}")


def _check_bool(value: object, name: str) -> None:
    if not isinstance(value, bool):
        raise MarkerError(f"argument {name!r} must be True or False, got {value!r}")


def _check_env(value: object) -> tuple[tuple[str, str], ...]:
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


def main_thread_misuse(item: pytest.Item) -> str | None:
    """The error of a ``cudagraph_main_thread`` marker used wrongly (None: none or used
    right): it takes no arguments, and it cannot share a test with the markers that move the
    test out of the main thread."""
    marks = main_thread_marks(item)
    if not marks:
        return None
    for mark in marks:
        if mark.args or mark.kwargs:
            given = [repr(a) for a in mark.args] + [f"{k}={v!r}" for k, v in mark.kwargs.items()]
            error = MarkerError(f"takes no arguments, got {', '.join(given)}")
            return describe_error(item.nodeid, MAIN_THREAD_MARKER, error)
    thread_mark, process_mark = plugin_marks(item)
    others = [
        f"@pytest.mark.{name}"
        for name, mark in ((THREAD_MARKER, thread_mark), (SUBPROCESS_MARKER, process_mark))
        if mark is not None
    ]
    if not others:
        return None
    error = MarkerError(
        f"cannot be combined with {' and '.join(others)} on one test: the test runs either in "
        "the main thread or out of it; remove one of them"
    )
    return describe_error(item.nodeid, MAIN_THREAD_MARKER, error)
