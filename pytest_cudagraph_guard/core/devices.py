"""Where a test ran, as the process it ran in knows it: the GPUs that the devices feature
(``devices``) gave the process, in one variable of its environment beside
``CUDA_VISIBLE_DEVICES`` (:data:`DEVICES_VARIABLE`), so that an xdist worker, a test process and
a spare set up ahead all say so the same way; read for each test's record by ``report.plugin``
and, for a process that died, by ``crash``. Also what xdist's controller tells a worker of its
devices (:data:`WORKER_DEVICES`, a key of ``workerinput``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

from .records import DeviceEntry

VISIBLE_VARIABLE: Final = "CUDA_VISIBLE_DEVICES"
# The devices named in CUDA_VISIBLE_DEVICES, as JSON: [[index, name], ...], cuda:0 first.
DEVICES_VARIABLE: Final = "PYTEST_CUDAGRAPH_GUARD_DEVICES"
WORKER_DEVICES: Final = "cudagraph_devices"


def devices_text(devices: Sequence[DeviceEntry]) -> str:
    return json.dumps([[device.index, device.name] for device in devices])


def devices_in(env: Mapping[str, str]) -> list[DeviceEntry]:
    """The devices the plugin gave the process of environment ``env``; none where it gave none
    (or the variable is not the plugin's JSON: it is then no record's business)."""
    text = env.get(DEVICES_VARIABLE)
    if not text:
        return []
    try:
        return [DeviceEntry(int(index), str(name)) for index, name in json.loads(text)]
    except (ValueError, TypeError):
        return []


def devices_of_worker(workerinput: Mapping[str, object]) -> list[DeviceEntry]:
    """The devices xdist's controller gave a worker (its ``workerinput``)."""
    given = workerinput.get(WORKER_DEVICES)
    if not isinstance(given, Mapping):
        return []
    return devices_in(given.get("env") or {})
