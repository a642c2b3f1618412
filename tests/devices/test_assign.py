"""The assignment logic alone: which devices the session uses, a worker's share, a test
process's reservation, and the devices CUDA would show under the user's variable."""

from __future__ import annotations

import pytest

from pytest_cudagraph_guard.core import devices as shares
from pytest_cudagraph_guard.devices import assign
from pytest_cudagraph_guard.devices.host import Device, HostDevice, visible

HOST = [HostDevice(i, f"GPU-{i}aaa-{i}", f"GPU {i}") for i in range(4)]
DEVICES = visible(HOST, None)


def indices(devices: list[Device]) -> list[int]:
    return [device.index for device in devices]


@pytest.mark.parametrize(
    ("workers", "shares"),
    [
        (4, [[0], [1], [2], [3]]),
        (8, [[0], [1], [2], [3], [0], [1], [2], [3]]),
        (6, [[0], [1], [2], [3], [0], [1]]),
        (2, [[0, 1], [2, 3]]),
        (3, [[0, 1], [2], [3]]),
        (1, [[0, 1, 2, 3]]),
    ],
)
def test_workers_share_the_devices_evenly(workers: int, shares: list[list[int]]) -> None:
    found = [indices(assign.worker_share(slot, workers, DEVICES)) for slot in range(workers)]
    assert found == shares


def test_a_reservation_starts_with_the_workers_own_devices_and_wraps() -> None:
    assert indices(assign.reservation([DEVICES[3]], DEVICES, 2)) == [3, 0]
    assert indices(assign.reservation(DEVICES[2:], DEVICES, 3)) == [2, 3, 0]
    assert indices(assign.reservation([], DEVICES, 2)) == [0, 1]
    assert indices(assign.reservation([DEVICES[1]], DEVICES, 1)) == [1]


def test_too_few_devices_is_a_skip_naming_both_numbers() -> None:
    assert assign.skip_reason(2, DEVICES[:1]) == "needs 2 GPUs, the host has 1"
    assert assign.skip_reason(1, []) == "needs 1 GPU, the host has none"
    assert assign.skip_reason(4, DEVICES) is None


def test_the_option_chooses_among_the_visible_devices() -> None:
    assert indices(assign.chosen(DEVICES, "auto", "o")) == [0, 1, 2, 3]
    assert indices(assign.chosen(DEVICES, 2, "o")) == [0, 1]
    assert indices(assign.chosen(DEVICES, (3, 1), "o")) == [3, 1]
    with pytest.raises(pytest.UsageError, match=r"^--x: 5 GPUs asked for, the host has 4 GPUs"):
        assign.chosen(DEVICES, 5, "--x")
    with pytest.raises(pytest.UsageError, match=r"^--x: no device 7 on the host, which has 4"):
        assign.chosen(DEVICES, (1, 7), "--x")


def test_auto_places_only_where_there_are_several_devices() -> None:
    assert not assign.places("auto", 1)
    assert assign.places("auto", 2)
    assert assign.places("auto", None)  # not known yet: the devices are counted
    assert assign.places(1, 1)
    assert not assign.places("off", len(DEVICES))
    assert not assign.places("off", None)


def test_the_users_variable_says_which_devices_exist() -> None:
    assert [(d.index, d.entry) for d in visible(HOST, "2, 0")] == [(2, "2"), (0, "0")]
    assert [(d.index, d.entry) for d in visible(HOST, "GPU-3a")] == [(3, "GPU-3a")]
    assert indices(visible(HOST, "1,9,2")) == [1]  # CUDA stops at the first bad entry
    assert indices(visible(HOST, "")) == []
    assert indices(visible(HOST, "-1")) == []


def test_a_process_is_given_its_devices_and_their_record() -> None:
    env = assign.environment(visible(HOST, "2,GPU-3"))
    assert env == {
        "CUDA_VISIBLE_DEVICES": "2,GPU-3",
        "PYTEST_CUDAGRAPH_GUARD_DEVICES": '[[2, "GPU 2"], [3, "GPU 3"]]',
    }


def test_only_workers_on_this_host_are_given_its_devices() -> None:
    from execnet import XSpec

    from pytest_cudagraph_guard.devices.plugin import on_this_host

    assert on_this_host(XSpec("popen"))
    assert not on_this_host(XSpec("ssh=gpu-box//python=python3"))
    assert not on_this_host(XSpec("socket=192.168.1.4:8888"))
    assert not on_this_host(XSpec("popen//via=gw0"))


def test_a_worker_reads_its_share_and_ignores_one_it_cannot_read() -> None:
    env = assign.environment(DEVICES[1:2])
    share = {"devices": [[1, "1", "GPU 1"]], "own": [0], "env": env}
    found = shares.worker_share({shares.WORKER_DEVICES: share})
    assert found is not None
    assert found["env"] == env
    assert indices(shares.devices_of_worker({shares.WORKER_DEVICES: share})) == [1]
    for unreadable in ({"devices": [], "own": []}, [share], None):
        assert shares.worker_share({shares.WORKER_DEVICES: unreadable}) is None
        assert shares.devices_of_worker({shares.WORKER_DEVICES: unreadable}) == []
