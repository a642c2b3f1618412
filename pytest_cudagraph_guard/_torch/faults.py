"""What happens when torch is not as the plugin expects, or when code of ours fails inside a torch
call: the part concerned stops, the user's call goes on as it would without the plugin, and one
notice per session and loss says so. The package turns the notices into warnings
(``core.warnings``); the parts of the boundary call ``run_ours`` and ``note_missing``.

It also holds a pytest session's share of the boundary's module state (``fault_guard``
begins and ends it). What one session noted, cached or left waiting is dropped at its end, and
the notices at its start too, so that a second session in one process (pytester in-process, IDE
runners) records what a fresh process would. What torch is patched with is reference-counted by
its users (the report's observers, the leak guard's counting, ``tls="init"`` runs) and undone by
them, and the patches' log shows only what is in effect: nothing here undoes what a session
still running (an outer one) uses.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, Final, NamedTuple, TypeVar

T = TypeVar("T")


class Loss(NamedTuple):
    """A part of the plugin that can stop on its own: the feature it belongs to, and what the
    user does not get while it is stopped."""

    feature: str
    loses: str


class _FaultState:
    """This session's notices: those said (by loss and by text), those not yet delivered, and
    the parts stopped after a bug of ours."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.said: set[str] = set()
        self.pending: list[str] = []
        self.stopped: set[Loss] = set()


_STATE: Final = _FaultState()


def begin_fault_session() -> None:
    """Forgets the notices said and the parts stopped: each session says each once. Called at
    a session's start and end."""
    with _STATE.lock:
        _STATE.said.clear()
        _STATE.pending.clear()
        _STATE.stopped.clear()


# The parts with state of their own, in the order they are ended: a part never imported in
# this process has none.
_WITH_STATE: Final = ("observe", "counting", "config_access", "import_hooks")


def end_session() -> None:
    for name in _WITH_STATE:
        part = sys.modules.get(f"{__package__}.{name}")
        if part is not None:
            part.end_session()
    begin_fault_session()


def is_stopped(loss: Loss) -> bool:
    """Whether ``loss``'s part was turned off in this session after a bug of ours."""
    return loss in _STATE.stopped


def take_notices() -> list[str]:
    """The notices not yet delivered, oldest first; each is delivered once."""
    with _STATE.lock:
        notices, _STATE.pending[:] = list(_STATE.pending), []
    return notices


def notice_once(key: str, text: str) -> None:
    """Queues ``text`` unless a notice with ``key`` was queued in this session."""
    with _STATE.lock:
        if key in _STATE.said:
            return
        _STATE.said.add(key)
        _STATE.pending.append(text)


def torch_release() -> str:
    from .release import torch_version  # only once there is something to say

    return torch_version() or "unknown"


def note_missing(loss: Loss, where: str, problem: str = "is missing") -> None:
    """A torch internal that ``loss`` needs is missing or has changed shape."""
    notice_once(
        f"missing:{loss.feature}:{loss.loses}",
        f"cudagraph_guard {loss.feature}: {loss.loses} unavailable on torch {torch_release()}: "
        f"{where} {problem}",
    )


def note_internal_error(loss: Loss, error: BaseException, *, stops: bool = True) -> None:
    """Code of ours failed: ``loss``'s part stops for the session, the rest goes on. A part
    that tests ask for by name (``stops=False``) is tried again for each: one that cannot do
    its work fails the test that asked, saying so."""
    if stops:
        with _STATE.lock:
            _STATE.stopped.add(loss)
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    what = (
        f"turned off for this session: {loss.loses}. The tests run on unchanged"
        if stops
        else f"{loss.loses}: a test that asks for it and cannot have it errors, saying so; "
        "the others run on unchanged"
    )
    notice_once(
        f"internal:{loss.feature}:{loss.loses}",
        f"cudagraph_guard internal error in {loss.feature} (torch {torch_release()}), {what}; "
        f"please report it with this traceback:\n{trace}",
    )


def note_uncopyable(name: str) -> None:
    notice_once(
        f"uncopyable:{name}",
        f"cudagraph_guard cannot snapshot `{name}`: in-place changes to it are not tracked",
    )


def run_ours(loss: Loss, action: Callable[..., T], *args: Any) -> T | None:
    """``action(*args)``: code of ours run inside a torch call or an import. What it raises is
    noted and never reaches the caller; None then, and None at once once ``loss`` stopped."""
    if is_stopped(loss):
        return None
    try:
        return action(*args)
    except Exception as error:
        note_internal_error(loss, error)
        return None
