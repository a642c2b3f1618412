"""What xdist's controller tells a worker of its devices (:data:`WORKER_DEVICES`, a key of
``workerinput``), read by the devices feature and by ``crash`` for a worker that died. A
process's own devices ride in its environment (``records.DEVICES_VARIABLE``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypedDict, cast

from .records import DeviceEntry, devices_in

VISIBLE_VARIABLE: Final = "CUDA_VISIBLE_DEVICES"
WORKER_DEVICES: Final = "cudagraph_devices"


class WorkerShare(TypedDict):
    """What a worker's ``workerinput`` holds under :data:`WORKER_DEVICES`."""

    devices: list[tuple[int, str, str]]  # the session's: host index, entry, name
    own: list[int]  # the worker's, by position in ``devices``; none where nothing is placed
    env: dict[str, str]  # the variables that give the worker its own


def worker_share(workerinput: Mapping[str, object]) -> WorkerShare | None:
    """A worker's share, as its controller gave it; None where it gave none (``off``, or the
    devices were not counted there), or none this version reads."""
    given = workerinput.get(WORKER_DEVICES)
    if not isinstance(given, Mapping) or not WorkerShare.__required_keys__ <= given.keys():
        return None
    return cast(WorkerShare, given)


def devices_of_worker(workerinput: Mapping[str, object]) -> list[DeviceEntry]:
    """The devices xdist's controller gave a worker (its ``workerinput``)."""
    share = worker_share(workerinput)
    return devices_in(share["env"]) if share is not None else []
