"""A pytest session's share of the torch boundary's module state.

What one session noted, cached or left waiting is dropped at its end, and the notices at its
start too, so that a second session in one process (pytester in-process, IDE runners) records
what a fresh process would. What torch is patched with is reference-counted by its users (the
report's observers, the leak guard's counting, ``tls="init"`` runs) and undone by them, and the
patches' log shows only what is in effect: nothing here undoes what a session still running (an
outer one) uses.
"""

from __future__ import annotations

import sys
from typing import Final

from .faults import begin_fault_session

# The parts with state of their own, in the order they are ended: a part never imported in
# this process has none.
_WITH_STATE: Final = ("observe", "counting", "config_access", "import_hooks")


def begin_session() -> None:
    begin_fault_session()


def end_session() -> None:
    for name in _WITH_STATE:
        part = sys.modules.get(f"{__package__}.{name}")
        if part is not None:
            part.end_session()
    begin_fault_session()
