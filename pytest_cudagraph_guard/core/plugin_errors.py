"""What a failure of the plugin's own code becomes: a notice of the torch boundary's (that part
stops for the session), a ``CudagraphGuardWarning`` at once, and a ``plugin-error`` entry on the
record of the test it met."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final

import pytest

from .. import _torch

if TYPE_CHECKING:
    from .records import ErrorEntry

PLUGIN_ERROR_HINT: Final = (
    "a failure of cudagraph_guard's own code, not of the test: that part of the plugin is off "
    "for the rest of the session (see the CudagraphGuardWarning); please report it"
)


def note_failure(
    loss: _torch.Loss,
    error: BaseException,
    item: pytest.Item | None = None,
    config: pytest.Config | None = None,
    *,
    configuring: bool = False,
    stops: bool = True,
) -> None:
    """A failure of our code in a hook: noted once for the session (that part stops, unless
    tests ask for it by name) and warned at once (as configuration's, with ``config``), and on
    the test's record."""
    from .facts import plugin_errors_key
    from .warnings import warn_torch_notices

    _torch.note_internal_error(loss, error, stops=stops)
    if item is not None:
        item.stash.setdefault(plugin_errors_key, []).append(plugin_error_record(loss, error))
    if config is None and item is not None:
        config = item.config
    nodeid = item.nodeid if item is not None else ""
    warn_torch_notices(config, when="config" if configuring else "runtest", nodeid=nodeid)


def plugin_error_record(loss: _torch.Loss, error: BaseException) -> ErrorEntry:
    """The record's entry for a failure of the plugin's own code met in a test."""
    from .diagnosis import short_traceback, type_name
    from .kinds import PLUGIN_ERROR
    from .records import error_entry

    return error_entry(
        threading.current_thread().name,
        type_name(error),
        f"{loss.feature}: {loss.loses}: {error}",
        kind=PLUGIN_ERROR,
        hint=PLUGIN_ERROR_HINT,
        traceback=short_traceback(error),
    )
