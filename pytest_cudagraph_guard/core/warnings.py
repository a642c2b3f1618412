"""The plugin's warning categories, public through ``pytest_cudagraph_guard``. Imports nothing
of the plugin's at load: ``-W error::pytest_cudagraph_guard.CudagraphGuardWarning`` finds them
without loading the rest."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest


class CudagraphConfigLeakWarning(UserWarning):
    """A test changed torch's cudagraph-related config or environment and left it changed."""


class CudagraphGuardWarning(UserWarning):
    """The plugin could not do part of its work (an unknown torch layout, say) and says what the
    user loses; the tests run on as they would without the plugin."""


def notify(
    config: pytest.Config,
    warning: Warning,
    *,
    when: str = "runtest",
    nodeid: str = "",
    filename: str = __file__,
    lineno: int = 0,
) -> None:
    """``warning`` in the warnings summary as pytest shows a test's own (``when``: ``config``,
    ``collect`` or ``runtest``), past the warning filters: the plugin's notices, and warnings a
    test process's filters already let through, are never made a test's error or hidden."""
    message = warnings.WarningMessage(warning, type(warning), filename, lineno)
    recorded = {"warning_message": message, "when": when, "nodeid": nodeid, "location": None}
    config.hook.pytest_warning_recorded.call_historic(kwargs=recorded)


def warn_torch_notices(
    config: pytest.Config | None, *, when: str = "runtest", nodeid: str = ""
) -> None:
    """Warns, once each, what the torch boundary noted since the last call: parts that could not
    work on this torch and internal errors of ours, past the warning filters (:func:`notify`).
    Called only from pytest hooks, where nothing of torch's or the user's is on the stack;
    without the session's ``config`` (none at hand), as a plain warning."""
    from .._torch import faults

    for notice in faults.take_notices():
        if config is None:
            warnings.warn(CudagraphGuardWarning(notice), stacklevel=2)
        else:
            notify(config, CudagraphGuardWarning(notice), when=when, nodeid=nodeid)
