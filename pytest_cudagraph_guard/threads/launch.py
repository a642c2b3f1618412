"""Starting the marker's threads and waiting for them with as few cross-thread wake-ups of the
main thread as possible: each one costs a context switch and a hand-over of the GIL, which on a
machine of few or virtual cores is most of what a trivial marked test costs."""

from __future__ import annotations

import sys
import threading

# The releases whose ``Thread.start`` ends by waiting on the thread's ``_started`` event, and
# whose ``Thread`` needs nothing else from that wait (3.10 to 3.13 alike).
UNAWAITED_START_RELEASES = ((3, 10), (3, 14))


def start_unawaited(thread: threading.Thread) -> None:
    """``thread.start()``, without waiting until the new thread has begun to run. ``start``'s
    last step waits for that, a wake-up of the caller that the marker does not need, since it
    waits for the thread's end anyway. Until the thread has begun, its ``ident`` is None and
    ``join`` raises RuntimeError; wait for a sign from its target before joining it. Where this
    Python's ``Thread`` is not as expected, this is a plain ``start()``."""
    started = getattr(thread, "_started", None)
    low, high = UNAWAITED_START_RELEASES
    if not (low <= sys.version_info[:2] < high and isinstance(started, threading.Event)):
        thread.start()
        return
    own = vars(started)
    own["wait"] = _started_at_once  # shadows Event.wait for start()'s one call
    try:
        thread.start()
    finally:
        del own["wait"]


def _started_at_once(timeout: float | None = None) -> bool:
    return True


class Countdown:
    """A latch the main thread waits on once, released by the last of ``count`` threads to call
    ``done``: one wake-up for the whole run, instead of one per thread joined."""

    def __init__(self, count: int) -> None:
        self._left = count
        self._guard = threading.Lock()
        self._zero = threading.Lock()
        self._zero.acquire()
        if count <= 0:
            self._zero.release()

    def done(self) -> None:
        with self._guard:
            self._left -= 1
            if self._left == 0:
                self._zero.release()

    def wait(self, timeout: float) -> bool:
        """Whether every thread was done within ``timeout`` seconds."""
        if self._zero.acquire(timeout=max(0.0, timeout)):
            self._zero.release()  # a second wait returns at once
            return True
        return False


class Alone:
    """The barrier of a run of one thread: nobody to wait for."""

    def wait(self, timeout: float | None = None) -> int:
        return 0

    def abort(self) -> None:
        pass


def barrier(parties: int) -> threading.Barrier | Alone:
    """A barrier for ``parties`` threads; for one, a barrier that costs nothing."""
    return threading.Barrier(parties) if parties > 1 else Alone()
