"""The devices feature's plugin object. ``plugin.py`` starts it first thing as the session
configures (:func:`start_devices`), before the other plugins' ``pytest_configure``, so that an
xdist worker has its ``CUDA_VISIBLE_DEVICES`` before anything of the session may initialise
CUDA (a conftest that initialises CUDA as it is imported is earlier still: it sees every GPU).

Where it counts the devices: xdist's controller (to spread its workers; under ``auto``, not
where the driver lists a single GPU: there is nothing to spread), a session given an explicit
``--cudagraph-gpus`` (to check it), and, on demand, a session that meets a test marked
``gpus=K``. Nowhere else: a session of ``auto`` without xdist asks nothing, and on one GPU or
none ``auto`` changes nothing. A worker gets its devices, and the session's, from the controller
(``workerinput``), or counts them itself where a ``gpus=K`` test needs them and the controller
did not."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

import pytest

from ..core.devices import VISIBLE_VARIABLE, WORKER_DEVICES, WorkerShare, worker_share
from ..core.option_readers import ascii_digits
from ..core.options import PluginOptions, plugin_options
from ..core.session import PluginNames
from ..core.stash import TestDevices, test_devices_key, test_process_key
from ..fault_guard import Loss, Part, guards, notice_once
from . import assign
from .host import Device, ask_nvml, listed_by_the_driver, visible

HEADER = Part(Loss("--cudagraph-gpus", "the GPUs said in the header"))
WORKERS = Part(Loss("--cudagraph-gpus", "xdist workers given their GPUs"))
UNCOUNTED = (
    "cudagraph_guard {origin}: the host's GPUs could not be counted (NVML failed or did not "
    "answer): no process is given its GPUs and no gpus=K test is skipped; each sees the "
    "devices it inherits"
)


def start_devices(config: pytest.Config) -> None:
    """Gives this process its devices (an xdist worker, or a session given explicit ones),
    and registers the feature where it has more to do. Nothing in a test process: the session
    that started it gave it its environment."""
    if test_process_key in config.stash:
        return
    # The variables as they were, again at the session's end (a session run inside a process,
    # as pytester's, leaves that process as it found it).
    saved = {name: os.environ.get(name) for name in assign.VARIABLES}
    config.add_cleanup(lambda: _restore(saved))
    plugin = DevicesPlugin(config, plugin_options(config))
    plugin.configure()
    config.stash[test_devices_key] = plugin.for_test
    config.pluginmanager.register(plugin, PluginNames.DEVICES)


def _restore(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


class DevicesPlugin:
    """The session's devices (counted once, where needed), this process's own share of them,
    and what xdist's workers and ``gpus=K`` tests get."""

    def __init__(self, config: pytest.Config, options: PluginOptions) -> None:
        self.config = config
        self.choice = options.gpus
        self.origin = options.origin_of("gpus")
        self._devices: list[Device] | None = None  # None: not counted yet
        self.uncounted = False  # NVML did not answer: nothing placed, no test skipped
        self.own: list[Device] = []  # this process's share, where it has one
        self._slots: list[object] = []  # the worker specs met, for a spec xdist does not list

    @property
    def controller(self) -> bool:
        """Whether this is xdist's controller: a ``--dist`` without workers (``-n``, ``--tx``)
        runs its tests in this process, as xdist itself decides."""
        option = self.config.option
        return (
            self.worker_input is None
            and getattr(option, "dist", "no") != "no"
            and bool(getattr(option, "tx", None))
        )

    @property
    def worker_input(self) -> Mapping[str, object] | None:
        found: Mapping[str, object] | None = getattr(self.config, "workerinput", None)
        return found

    def configure(self) -> None:
        if self.worker_input is not None:
            self._take_worker_share(worker_share(self.worker_input))
        elif self.controller:
            if self._spreads():
                self.devices()  # the count's usage errors before any worker starts
        elif not isinstance(self.choice, str):  # a count or indices: this session uses them
            self.own = self.devices()
            if not self.uncounted:
                os.environ.update(assign.environment(self.own))

    def devices(self) -> list[Device]:
        """The devices of the session, as the option chose them from those visible."""
        if self._devices is None:
            host = ask_nvml()
            if host is None:
                self.uncounted = True
                self._devices = []
                notice_once(f"uncounted:{self.origin}", UNCOUNTED.format(origin=self.origin))
            else:
                found = visible(host, os.environ.get(VISIBLE_VARIABLE))
                self._devices = assign.chosen(found, self.choice, self.origin)
        return self._devices

    def _spreads(self) -> bool:
        """Whether xdist's controller gives its workers their devices, as far as the driver's
        list tells before NVML is asked (NVML, asked in a fresh interpreter, would hold up the
        workers' start for nothing where the driver lists one GPU)."""
        return assign.places(self.choice, self._listed)

    @functools.cached_property
    def _listed(self) -> int | None:
        return listed_by_the_driver()

    def _take_worker_share(self, given: WorkerShare | None) -> None:
        """On a worker: the session's devices and this worker's, as the controller said, its
        variables set in this process (and so in its test processes and their spares)."""
        if given is None:  # the controller counted none: ``off``, or one GPU under ``auto``
            return
        self._devices = [Device(*device) for device in given["devices"]]
        self.own = [self._devices[position] for position in given["own"]]
        os.environ.update(given["env"])

    @pytest.hookimpl(optionalhook=True)
    @guards(WORKERS)
    def pytest_configure_node(self, node: Any) -> None:
        """On xdist's controller, for each worker it starts: its share of the devices, in its
        ``workerinput``. A worker that replaces one that died runs on xdist's spec of the one
        it replaces (under a new id, ``gwN``): it gets the same share."""
        if not self._spreads() or not on_this_host(node.gateway.spec):
            return  # a worker on another host counts its own, where a gpus=K test needs them
        devices = self.devices()
        if self.uncounted:
            return  # the worker counts again where a gpus=K test needs it
        specs = list(getattr(node.nodemanager, "specs", []))
        slot = self._slot(node.gateway.spec, specs)
        own = assign.worker_share(slot, max(len(specs), 1), devices)
        placed = assign.places(self.choice, len(devices))
        node.workerinput[WORKER_DEVICES] = WorkerShare(
            devices=[(device.index, device.entry, device.name) for device in devices],
            own=[devices.index(device) for device in own] if placed else [],
            env=assign.environment(own) if placed else {},
        )

    def _slot(self, spec: object, specs: list[object]) -> int:
        """The worker's place among xdist's workers: that of its spec, which a replacement
        worker shares with the worker it replaces."""
        for slot, known in enumerate(specs):
            if known is spec:
                return slot
        if not any(known is spec for known in self._slots):
            self._slots.append(spec)
        return next(slot for slot, known in enumerate(self._slots) if known is spec)

    @guards(HEADER)
    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        """Where the tests run: the session's devices, and how xdist's workers share them."""
        if self._devices is None or not assign.places(self.choice, len(self._devices)):
            return []
        devices = ", ".join(f"{d.index} ({d.name})" for d in self._devices)
        if not self.controller:
            return [f"cudagraph gpus: tests on {devices}"]
        workers = _workers(getattr(config.option, "tx", None) or [])
        if workers < 1:
            return [f"cudagraph gpus: {devices}, spread over xdist's workers"]
        shares = [
            f"gw{slot} on {','.join(str(d.index) for d in share)}"
            for slot in range(workers)
            if (share := assign.worker_share(slot, workers, self._devices))
        ]
        return [f"cudagraph gpus: {devices}; {', '.join(shares)}"]

    def for_test(self, wanted: int) -> TestDevices:
        """The devices of a test process that needs ``wanted`` of them (counted here the first
        time a session without its devices needs them)."""
        devices = self.devices()
        if self.uncounted:
            return TestDevices({})
        skip = assign.skip_reason(wanted, devices)
        if skip is not None:
            return TestDevices({}, skip)
        if not assign.places(self.choice, len(devices)):
            return TestDevices({})
        return TestDevices(assign.environment(assign.reservation(self.own, devices, wanted)))


def on_this_host(spec: object) -> bool:
    """Whether xdist starts the worker of ``spec`` on this host (``popen``, not ``via`` a
    gateway): only there are the controller's devices the worker's."""
    return bool(getattr(spec, "popen", False)) and not getattr(spec, "via", None)


def _workers(tx: list[str]) -> int:
    """How many workers xdist starts for its ``--tx`` specs (``-n N`` is N ``popen``;
    ``--maxprocesses`` caps that list; ``2*popen`` is two)."""
    count = 0
    for spec in tx:
        times, star, _ = spec.partition("*")
        count += int(times) if star and ascii_digits(times) else 1
    return count
