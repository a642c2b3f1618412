"""The host's GPUs, asked of NVML (the driver's management library) in a throwaway Python
process: NVML creates no CUDA context, but it leaves a thread in the process that loads it, and
a session with a second thread must not fork its test processes; a fork of the session could
inherit a lock that one of xdist's threads holds. A fresh interpreter and NVML's start cost
0.13-0.15 s on an H100 host, paid only where the devices are needed (xdist's controller where
the driver's folder does not list a single GPU, an explicit ``--cudagraph-gpus``, a test marked
``gpus=K``).

NVML through ``pynvml`` (nvidia-ml-py) where it is installed, else through ``libnvidia-ml``
itself; no NVML (no driver): no GPU. NVML numbers the devices as ``nvidia-smi`` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..core.option_readers import ascii_digits

_ASKING_S: Final = 30.0
# Where the NVIDIA driver lists its GPUs, a folder each (named by PCI address); in a container,
# the NVIDIA container toolkit shows there only the container's own.
DRIVER_GPUS: Final = Path("/proc/driver/nvidia/gpus")
# Run by ``python -c``: prints [[index, uuid, name], ...] as JSON; [] where there is no driver
# (no NVML library, or NVML says none is loaded), null where NVML is there but fails.
_ASK: Final = r"""
import json


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def by_pynvml():
    import pynvml

    try:
        pynvml.nvmlInit()
    except Exception as error:
        none = tuple(
            getattr(pynvml, name, ())
            for name in ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")
        )
        return [] if isinstance(error, none) else None
    try:
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            found.append([index, text(uuid), text(pynvml.nvmlDeviceGetName(handle))])
        return found
    finally:
        pynvml.nvmlShutdown()


def by_library():
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return []
    status = nvml.nvmlInit_v2()
    if status != 0:
        return [] if status == 9 else None  # 9: NVML_ERROR_DRIVER_NOT_LOADED
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        found = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            uuid, name = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
            if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
                return found
            nvml.nvmlDeviceGetUUID(handle, uuid, 96)
            nvml.nvmlDeviceGetName(handle, name, 96)
            found.append([index, text(uuid.value), text(name.value)])
        return found
    finally:
        nvml.nvmlShutdown()


try:
    found = by_pynvml()
except ImportError:
    found = by_library()
except Exception:
    found = None
print(json.dumps(found))
"""


def listed_by_the_driver() -> int | None:
    """How many GPUs the driver lists (:data:`DRIVER_GPUS`), read at once, with no process
    started; None where it lists none: no driver there, or one that only NVML can count (a
    container that hides the folder, WSL)."""
    try:
        listed = len(os.listdir(DRIVER_GPUS))
    except OSError:
        return None
    return listed or None


@dataclass(frozen=True)
class HostDevice:
    index: int  # NVML's
    uuid: str
    name: str


def ask_nvml() -> list[HostDevice] | None:
    """The host's devices, asked in a fresh interpreter (this one's environment: a ``pynvml``
    on ``PYTHONPATH`` answers): none without a driver; None where NVML failed, hung or gave no
    answer (its last line of output, as a ``sitecustomize`` may print before it)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _ASK],
            capture_output=True,
            timeout=_ASKING_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        lines = done.stdout.splitlines()
        found = json.loads(lines[-1]) if lines else None
        if found is None:
            return None
        return [HostDevice(int(i), str(uuid), str(name)) for i, uuid, name in found]
    except (OSError, subprocess.SubprocessError, ValueError, TypeError):
        return None


@dataclass(frozen=True)
class Device:
    """A device this session may use: its host index, how ``CUDA_VISIBLE_DEVICES`` names it
    (as the user's variable did, else by its index) and its name."""

    index: int
    entry: str
    name: str


def visible(host: Sequence[HostDevice], variable: str | None) -> list[Device]:
    """The devices CUDA would show under the user's ``CUDA_VISIBLE_DEVICES`` (``variable``;
    None: every device of the host). As CUDA reads it, the list ends at its first entry that
    names no device (an index the host lacks, or what is neither an index nor a ``GPU-``
    UUID's start: a MIG instance, which this plugin does not spread)."""
    if variable is None:
        return [Device(d.index, str(d.index), d.name) for d in host]
    found: list[Device] = []
    for entry in (part.strip() for part in variable.split(",")):
        device = _named(host, entry)
        if device is None or any(d.index == device.index for d in found):
            break
        found.append(Device(device.index, entry, device.name))
    return found


def _named(host: Sequence[HostDevice], entry: str) -> HostDevice | None:
    if ascii_digits(entry):
        return next((d for d in host if d.index == int(entry)), None)
    if entry.startswith("GPU-"):
        matching = [d for d in host if d.uuid.startswith(entry)]
        return matching[0] if len(matching) == 1 else None
    return None
