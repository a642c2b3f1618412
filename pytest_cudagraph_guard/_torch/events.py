"""What the observers of torch's CUDA-graph work receive: one small typed record per event, and
the list of observers they go to.

Every event carries ``thread``, the name of the thread it happened in (``thread_label``); where
torch makes it cheap, ``function``, the compiled function as its user knows it
(``step (model.py:12)``). ``settings`` are the cudagraph keys of inductor's config as the acting
thread saw them: at every compile and recording, and at a replay only while a test has no such
moment yet (``settings_wanted``). Also the names the readers share with torch's side: the
inductor backend and the settings that turn CUDA graphs on (read by ``torch_settings``, the
fixtures, ``report.activity``, ``report.render`` and ``report.entries``, and here by the config
modules and ``observe``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

# A torch.compile option as an event carries it (options of other types are left out).
CompileOption = bool | int | float | str
# Config keys with the values torch acts under, of whatever type torch gives them.
ConfigValues = dict[str, object]
INDUCTOR_BACKEND: Final = "inductor"  # ``Compiled.backend`` of inductor's compiles
# The settings that turn CUDA graphs on (``torch._inductor.config``'s keys).
CUDAGRAPHS_KEY: Final = "triton.cudagraphs"
TREES_KEY: Final = "triton.cudagraph_trees"
CUDAGRAPH_SWITCHES: Final = (CUDAGRAPHS_KEY, TREES_KEY)


def cudagraph_switches(trees: bool = True) -> dict[str, bool]:
    """The settings that turn CUDA graphs on: ``triton.cudagraphs`` and, as ``trees`` says,
    ``triton.cudagraph_trees``."""
    return {CUDAGRAPHS_KEY: True, TREES_KEY: trees}


@dataclass(frozen=True, slots=True)
class Compiled:
    """A torch.compile backend call; inductor's with its options."""

    thread: str
    backend: str
    options: dict[str, CompileOption]
    settings: ConfigValues
    function: str | None = None


@dataclass(frozen=True, slots=True)
class CompileEnded:
    """A torch.compile backend call returned: the function is compiled, and what comes next is
    the compiled code running."""

    thread: str
    backend: str
    function: str | None = None


@dataclass(frozen=True, slots=True)
class Cudagraphified:
    """A compiled graph wrapped for CUDA graphs (``trees``: through CUDAGraph Trees)."""

    thread: str
    trees: Any
    function: str | None = None


@dataclass(frozen=True, slots=True)
class RecordingStarted:
    """A tree manager starts recording a function's graph: a crash in its capture comes before
    ``Recorded``."""

    thread: str
    function: str | None = None


@dataclass(frozen=True, slots=True)
class Recorded:
    """A CUDA graph captured (a tree manager's set-up capture is not one)."""

    thread: str
    settings: ConfigValues
    function: str | None = None


@dataclass(frozen=True, slots=True)
class Replayed:
    """A CUDA graph replayed (emitted once the replay returned); ``settings`` only at a test's
    first moment."""

    thread: str
    settings: ConfigValues | None = None
    function: str | None = None


@dataclass(frozen=True, slots=True)
class Skipped:
    """torch ran a graph without CUDA graphs, with its reason."""

    thread: str
    reason: str
    function: str | None = None


@dataclass(frozen=True, slots=True)
class CrossThread:
    """A compiled function's graphs run through the tree manager that ``creator`` made."""

    thread: str
    creator: str
    function: str


@dataclass(frozen=True, slots=True)
class Rerecorded:
    """torch recorded a function's CUDA graph again, with torch's reason."""

    thread: str
    function: str
    reason: str


@dataclass(frozen=True, slots=True)
class SlowPath:
    """torch left the CUDA-graph fast path for a function, with torch's reason."""

    thread: str
    function: str
    reason: str


@dataclass(slots=True)
class GraphOrigin:
    """Where a compiled graph was made: the test (its node id; "" where none was running), the
    thread, the cudagraph settings in effect there, the keys its compile's options set, and
    torch's reason where it ran the graph without CUDA graphs (noted once torch says so)."""

    test: str
    thread: str
    settings: ConfigValues
    options: frozenset[str]
    function: str | None = None
    skip: str | None = None


@dataclass(frozen=True, slots=True)
class RanEarlierGraph:
    """The running test called a compiled graph that an earlier test compiled (once per graph,
    thread and test), with where it was made (None: before observing began); ``graph`` tells
    the graphs apart."""

    thread: str
    origin: GraphOrigin | None = None
    graph: int = 0


TorchEvent = (
    Compiled
    | CompileEnded
    | Cudagraphified
    | RecordingStarted
    | Recorded
    | Replayed
    | Skipped
    | CrossThread
    | Rerecorded
    | SlowPath
    | RanEarlierGraph
)
Observer = Callable[[TorchEvent], None]


@dataclass
class _Audience:
    """The observers, and what every wrapper consults before it does any work: whether a test
    still waits for its first settings moment, and the number of the running test."""

    observers: list[Observer] = field(default_factory=list)
    settings_wanted: bool = False
    test_number: int = 0
    test_name: str = ""  # the running test's node id


AUDIENCE: Final = _Audience()


def emit(event: TorchEvent) -> None:
    for observer in list(AUDIENCE.observers):
        observer(event)
