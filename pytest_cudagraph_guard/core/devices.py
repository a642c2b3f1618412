"""What xdist's controller tells a worker of its devices (:data:`WORKER_DEVICES`, a key of
``workerinput``), read by the devices feature and by ``crash`` for a worker that died. A
process's own devices ride in its environment (``records.DEVICES_VARIABLE``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .records import DeviceEntry, devices_in

VISIBLE_VARIABLE: Final = "CUDA_VISIBLE_DEVICES"
WORKER_DEVICES: Final = "cudagraph_devices"


def devices_of_worker(workerinput: Mapping[str, object]) -> list[DeviceEntry]:
    """The devices xdist's controller gave a worker (its ``workerinput``)."""
    given = workerinput.get(WORKER_DEVICES)
    if not isinstance(given, Mapping):
        return []
    return devices_in(given.get("env") or {})
