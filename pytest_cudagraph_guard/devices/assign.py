"""Which devices go where, without asking anything of the host: the devices the session uses
(the option applied to those visible), an xdist worker's share of them, the devices a
``gpus=K`` test's process reserves, and the variables that give a process its devices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import pytest

from ..core.devices import VISIBLE_VARIABLE
from ..core.option_readers import GPUS_AUTO, GPUS_OFF, GpuChoice
from ..core.records import DEVICES_VARIABLE, DeviceEntry, devices_text
from .host import Device


def chosen(visible: Sequence[Device], choice: GpuChoice, origin: str) -> list[Device]:
    """The devices the session uses: every visible one (``auto``, ``off``), the first N, or
    those of the given indices in that order; a count or an index the host lacks is a usage
    error that names ``origin`` (the option or ini key) and the devices there are."""
    if choice in (GPUS_AUTO, GPUS_OFF):
        return list(visible)
    if isinstance(choice, int):
        if choice > len(visible):
            raise pytest.UsageError(
                f"{origin}: {choice} GPUs asked for, the host has {_have(visible)}"
            )
        return list(visible[:choice])
    assert isinstance(choice, tuple)
    by_index = {device.index: device for device in visible}
    missing = [index for index in choice if index not in by_index]
    if missing:
        raise pytest.UsageError(
            f"{origin}: no device {', '.join(map(str, missing))} on the host, which has "
            f"{_have(visible)}"
        )
    return [by_index[index] for index in choice]


def _have(visible: Sequence[Device]) -> str:
    if not visible:
        return "no GPU"
    indices = ", ".join(str(device.index) for device in visible)
    return f"{_gpus(len(visible))} ({indices})"


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def places(choice: GpuChoice, count: int | None) -> bool:
    """Whether the plugin gives processes their devices, ``count`` of them (counted, or as the
    driver lists them; None: not known yet): ``auto`` only where there may be several (on one
    GPU, nothing changes), a count or indices always, ``off`` never."""
    if choice == GPUS_OFF:
        return False
    return choice != GPUS_AUTO or count is None or count > 1


def worker_share(slot: int, workers: int, devices: Sequence[Device]) -> list[Device]:
    """The devices of the xdist worker in ``slot`` (0 to ``workers`` - 1), spread evenly: with
    as many workers as devices or more, one device each, in turn; with fewer, each a run of
    consecutive devices, the first workers one more where they do not divide evenly."""
    if not devices or workers < 1:
        return []
    if workers >= len(devices):
        return [devices[slot % len(devices)]]
    each, extra = divmod(len(devices), workers)
    start = slot * each + min(slot, extra)
    return list(devices[start : start + each + (1 if slot < extra else 0)])


def reservation(own: Sequence[Device], devices: Sequence[Device], wanted: int) -> list[Device]:
    """``wanted`` devices for a test process of a worker that has ``own``: its own first, then
    the devices after them, in turn (so that workers' reservations start apart); all of them
    where ``wanted`` is no fewer. The caller has checked that there are enough."""
    start = devices.index(own[0]) if own else 0
    following = [devices[(start + step) % len(devices)] for step in range(len(devices))]
    ordered = [*own, *(device for device in following if device not in own)]
    return ordered[:wanted]


def skip_reason(wanted: int, devices: Sequence[Device]) -> str | None:
    """Why a test that needs ``wanted`` GPUs is skipped; None where there are enough."""
    if wanted <= len(devices):
        return None
    have = len(devices)
    return f"needs {_gpus(wanted)}, the host has {have if have else 'none'}"


# The variables that give a process its devices: CUDA's, and the plugin's record of them.
VARIABLES: Final = (VISIBLE_VARIABLE, DEVICES_VARIABLE)


def environment(devices: Sequence[Device]) -> dict[str, str]:
    """The variables (:data:`VARIABLES`) that give a process ``devices``."""
    entries = [DeviceEntry(device.index, device.name) for device in devices]
    return {
        VISIBLE_VARIABLE: ",".join(device.entry for device in devices),
        DEVICES_VARIABLE: devices_text(entries),
    }
