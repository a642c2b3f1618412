"""The installed distributions' metadata, read once by a zygote for its test processes.

As a session starts, pytest (marking plugins for rewriting), pluggy (loading ``pytest11`` entry
points) and plugins such as pytest-randomly (its seeders) each read and parse every installed
distribution's entry points, and pytest the file lists of the plugins': about 12 ms of CPU a test
process with a dozen plugins installed. The zygote reads them once for the ``sys.path`` its test
processes will have (:func:`read_ahead`); a test process is served that reading while its session
starts (:func:`served`, until :func:`stop_serving`), and only while ``sys.path``, the working
folder and every ``sys.path`` folder's modification time are those it was read with, the rule
``importlib.metadata`` keeps for its own cache of folder listings. Read by :mod:`.zygote` and
:mod:`.child`."""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

_PYTEST_PLUGINS = "pytest11"
_unserved = importlib.metadata.distributions


class _ReadDistribution(importlib.metadata.PathDistribution):
    """A distribution whose entry points and file list are parsed once; the rest as read."""

    @functools.cached_property
    def entry_points(self) -> importlib.metadata.EntryPoints:
        return super().entry_points

    @functools.cached_property
    def files(self) -> list[importlib.metadata.PackagePath] | None:
        return super().files


class _Reading(NamedTuple):
    where: tuple[object, ...]  # what it holds for: see _where
    distributions: tuple[importlib.metadata.Distribution, ...]


class _Store:
    reading: _Reading | None = None


def _where() -> tuple[object, ...]:
    """``sys.path``, the working folder and each ``sys.path`` folder's modification time."""
    times: list[int] = []
    for entry in sys.path:
        try:
            times.append(os.stat(entry or ".").st_mtime_ns)
        except OSError:
            times.append(-1)
    return (os.getcwd(), *sys.path, *times)


def read_ahead(cwd: str) -> None:
    """In the zygote: reads the distributions for the current ``sys.path`` and the working
    folder ``cwd`` of its test processes, unless read for them already; a reading that fails
    leaves test processes to read for themselves."""
    with working_in(cwd):  # a relative entry of sys.path ("") is the test process's folder
        where = _where()
        if _Store.reading is not None and _Store.reading.where == where:
            return
        _Store.reading = None
        try:
            found = tuple(_read(_unserved()))
        except Exception:  # a broken distribution: each session meets it as it would without us
            return
        _Store.reading = _Reading(where, found)


@contextlib.contextmanager
def working_in(folder: str | None) -> Iterator[None]:
    """In ``folder`` (where it can be entered), then back in the zygote's own, the session's
    folder, where it keeps its spares."""
    own = os.getcwd()
    try:
        if folder is not None:
            with contextlib.suppress(OSError):
                os.chdir(folder)
        yield
    finally:
        os.chdir(own)


def _read(found: Iterable[importlib.metadata.Distribution]) -> Iterator[_ReadDistribution]:
    for distribution in found:
        if not isinstance(distribution, importlib.metadata.PathDistribution):
            raise TypeError(f"not read from a path: {distribution!r}")
        read = _ReadDistribution(distribution._path)
        if any(point.group == _PYTEST_PLUGINS for point in read.entry_points):
            _ = read.files  # pytest reads a plugin's files to mark them for rewriting
        yield read


def _serve(**context: Any) -> Iterable[importlib.metadata.Distribution]:
    reading = _Store.reading
    if context or reading is None or reading.where != _where():
        return _unserved(**context)
    return iter(reading.distributions)


@contextlib.contextmanager
def served() -> Iterator[None]:
    """In a test process, around its session: ``importlib.metadata.distributions()`` serves
    the zygote's reading until :func:`stop_serving` (or the end of the block)."""
    if _Store.reading is not None:
        importlib.metadata.distributions = _serve
    try:
        yield
    finally:
        stop_serving()


def stop_serving() -> None:
    """The session has started: the test and its fixtures read the distributions themselves."""
    importlib.metadata.distributions = _unserved
    _Store.reading = None
