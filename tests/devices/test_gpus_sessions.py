"""``--cudagraph-gpus`` and ``gpus=K`` in real sessions, on a host of stand-in GPUs (NVML a
stand-in ``pynvml``; CUDA the isolation tests' stand-in): xdist's workers spread over the
devices, a replaced worker on its predecessor's, test processes and their spares on their
worker's, ``gpus=K`` reserved or skipped, and nothing changed on a host of one GPU or none."""

from __future__ import annotations

import pytest

from ..conftest import QUIET_INI
from ..helpers import records_by_name
from .conftest import FakeGpus, logged, nvml_asked, nvml_askers

H100 = "NVIDIA H100 80GB HBM3"
REPORT = "--cudagraph-report=json:r.json"

# Each test notes its name, its worker and the devices it was given.
NOTE = """
import os
import time

import pytest


def note(name):
    with open(os.environ["RAN"], "a") as log:
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        log.write(f"{name} {worker} {os.environ.get('CUDA_VISIBLE_DEVICES')}\\n")
"""

IN_WORKERS = (
    NOTE
    + """
@pytest.mark.parametrize("n", range(8))
def test_in_worker(n):
    note(f"test_{n}")
    time.sleep(0.05)
"""
)


def _ran(tester: pytest.Pytester) -> list[tuple[str, str, str]]:
    return [(name, worker, devices) for name, worker, devices in logged(tester, "ran.log")]


@pytest.mark.parametrize(
    ("workers", "gpus", "shares"),
    [
        (2, 2, {"gw0": "0", "gw1": "1"}),
        (2, 4, {"gw0": "0,1", "gw1": "2,3"}),
        (3, 2, {"gw0": "0", "gw1": "1", "gw2": "0"}),
    ],
)
@pytest.mark.wide
def test_xdist_workers_spread_over_the_gpus(
    fake_gpus: FakeGpus, workers: int, gpus: int, shares: dict[str, str]
) -> None:
    tester = fake_gpus(*[H100] * gpus)
    tester.makepyfile(IN_WORKERS)
    result = tester.runpytest("-p", "no:cacheprovider", "-n", str(workers), REPORT)
    result.assert_outcomes(passed=8)
    ran = _ran(tester)
    assert {worker for _, worker, _ in ran} <= set(shares)
    assert all(devices == shares[worker] for _, worker, devices in ran), ran
    listed = ", ".join(f"gw{i} on {share}" for i, share in enumerate(shares.values()))
    result.stdout.fnmatch_lines([f"cudagraph gpus: 0 ({H100}), 1 ({H100})*; {listed}"])
    records = records_by_name(tester.path / "r.json")
    for name, _, devices in ran:
        record = records[f"test_in_worker[{name[5:]}]"]
        assert record["devices"] == [
            {"index": int(index), "name": H100} for index in devices.split(",")
        ]


IN_PROCESSES = (
    NOTE
    + """
@pytest.mark.parametrize("n", range(8))
def test_in_process(n):
    note(f"test_{n}")
    import fake_cuda  # CUDA initialised: logged with the devices the process had then
"""
)


@pytest.mark.wide
def test_test_processes_and_their_spares_are_on_their_workers_gpus(fake_gpus: FakeGpus) -> None:
    tester = fake_gpus(H100, H100)
    tester.makepyfile(IN_PROCESSES)
    tester.makeini(f"{QUIET_INI}cudagraph_spares = 2\n")
    result = tester.runpytest("-p", "no:cacheprovider", "-n", "2", "--cudagraph-subprocess")
    result.assert_outcomes(passed=8)
    shares = {"gw0": "0", "gw1": "1"}
    assert all(devices == shares[worker] for _, worker, devices in _ran(tester))
    inits = logged(tester, "inits.log")  # the test processes' and the spares' set-ups
    assert len(inits) >= len(_ran(tester))
    assert all(devices == shares[worker] for _, devices, worker in inits), inits


CRASHES = (
    NOTE
    + """
def test_0_crashes():
    note("test_0_crashes")
    os._exit(1)


@pytest.mark.parametrize("n", range(16))
def test_after(n):
    note(f"test_{n}")
    time.sleep(0.4)
"""
)


@pytest.mark.wide
def test_a_replaced_worker_is_on_its_predecessors_gpu(fake_gpus: FakeGpus) -> None:
    # Three GPUs for two workers (gw0 on 0,1; gw1 on 2): the replacement's id, gw2, names no
    # share of its own, whichever worker it replaces.
    tester = fake_gpus(H100, H100, H100)
    tester.makepyfile(CRASHES)
    result = tester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--dist", "load", "--max-worker-restart=1", REPORT
    )
    result.assert_outcomes(passed=16, failed=1)
    ran = _ran(tester)
    [(_, crashed, device)] = [line for line in ran if line[0] == "test_0_crashes"]
    replacement = [devices for _, worker, devices in ran if worker == "gw2"]
    assert replacement, ran  # the replacement ran tests
    assert set(replacement) == {device}
    record = records_by_name(tester.path / "r.json")["test_0_crashes"]
    assert record["where"] == f"xdist worker {crashed}"
    assert record["devices"] == [{"index": int(i), "name": H100} for i in device.split(",")]


GPUS_MARKED = (
    NOTE
    + """
@pytest.mark.cudagraph_subprocess(gpus=2)
def test_two():
    note("test_two")


@pytest.mark.cudagraph_subprocess(gpus=1)
def test_one():
    note("test_one")


@pytest.mark.cudagraph_subprocess(gpus=3)
def test_three():
    note("test_three")
"""
)


@pytest.mark.wide
def test_gpus_reserves_devices_for_the_test_process_or_skips_it(fake_gpus: FakeGpus) -> None:
    tester = fake_gpus(H100, "NVIDIA A100")
    tester.makepyfile(GPUS_MARKED)
    result = tester.runpytest("-p", "no:cacheprovider", "-rs", REPORT)
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED *:22: needs 3 GPUs, the host has 2"])
    assert {name: devices for name, _, devices in _ran(tester)} == {
        "test_two": "0,1",
        "test_one": "0",
    }
    records = records_by_name(tester.path / "r.json")
    assert records["test_two"]["devices"] == [
        {"index": 0, "name": H100},
        {"index": 1, "name": "NVIDIA A100"},
    ]
    assert nvml_asked(tester) == 1  # once, for the session, at the first test that needed it


@pytest.mark.wide
def test_a_workers_reservation_starts_with_its_own_gpu(fake_gpus: FakeGpus) -> None:
    tester = fake_gpus(H100, H100)
    tester.makepyfile(
        NOTE
        + """
@pytest.mark.cudagraph_subprocess(gpus=2)
@pytest.mark.parametrize("n", range(4))
def test_two(n):
    note(f"test_{n}")
"""
    )
    result = tester.runpytest("-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=4)
    ran = _ran(tester)
    assert all(devices == {"gw0": "0,1", "gw1": "1,0"}[worker] for _, worker, devices in ran)


@pytest.mark.wide
def test_a_host_with_fewer_gpus_skips_a_test_that_needs_more(fake_gpus: FakeGpus) -> None:
    tester = fake_gpus(H100)
    tester.makepyfile(GPUS_MARKED)
    result = tester.runpytest("-p", "no:cacheprovider", "-rs", "-n", "2")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED *: needs 2 GPUs, the host has 1"])
    assert _ran(tester) == [("test_one", _ran(tester)[0][1], "None")]  # nothing changed


@pytest.mark.parametrize("gpus", [(H100,), ()], ids=["one-gpu", "no-gpu"])
@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["session", "xdist"])
@pytest.mark.wide
def test_nothing_changes_on_a_host_of_one_gpu_or_none(
    fake_gpus: FakeGpus, gpus: tuple[str, ...], xdist: list[str]
) -> None:
    tester = fake_gpus(*gpus)
    tester.makepyfile(
        IN_WORKERS
        + """
@pytest.mark.cudagraph_subprocess
def test_in_process():
    note("test_in_process")
    assert "PYTEST_CUDAGRAPH_GUARD_DEVICES" not in os.environ
"""
    )
    result = tester.runpytest("-p", "no:cacheprovider", *xdist, REPORT)
    result.assert_outcomes(passed=9)
    assert all(devices == "None" for _, _, devices in _ran(tester))
    result.stdout.no_fnmatch_line("*cudagraph gpus*")
    assert all(not r["devices"] for r in records_by_name(tester.path / "r.json").values())
    # A session alone asks nothing; xdist's controller asks where the driver lists no GPU.
    assert nvml_askers(tester) == (["controller"] if xdist and not gpus else [])


@pytest.mark.parametrize("listed", [1, 2])
@pytest.mark.wide
def test_xdist_asks_nvml_nothing_where_the_driver_lists_one_gpu(
    fake_gpus: FakeGpus, listed: int
) -> None:
    """The driver's folder decides: listing one GPU, the controller asks NVML nothing (whose
    two stand-in GPUs then go unspread); listing two, it asks and spreads its workers."""
    tester = fake_gpus(H100, H100, listed=listed)
    tester.makepyfile(IN_WORKERS)
    result = tester.runpytest("-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=8)
    spread = {devices for _, _, devices in _ran(tester)}
    expected = ([], {"None"}) if listed == 1 else (["controller"], {"0", "1"})
    assert (nvml_askers(tester), spread) == expected


@pytest.mark.wide
def test_a_worker_counts_the_gpus_itself_where_the_controller_did_not(
    fake_gpus: FakeGpus,
) -> None:
    """On one listed GPU the controller gives its workers nothing: the worker that meets a
    ``gpus=K`` test asks NVML itself, and skips the test that needs more than the host has."""
    tester = fake_gpus(H100)
    tester.makepyfile(test_marked=GPUS_MARKED, test_plain=IN_WORKERS)
    result = tester.runpytest("-p", "no:cacheprovider", "-rs", "-n", "2", "--dist", "loadfile")
    result.assert_outcomes(passed=9, skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED *: needs 2 GPUs, the host has 1"])
    marked_on = {worker for name, worker, _ in _ran(tester) if name == "test_one"}
    assert nvml_askers(tester) == sorted(marked_on)


@pytest.mark.wide
def test_explicit_devices_are_the_sessions_and_its_test_processes(fake_gpus: FakeGpus) -> None:
    tester = fake_gpus(H100, H100, H100)
    tester.makepyfile(
        IN_WORKERS
        + """
@pytest.mark.cudagraph_subprocess
def test_in_process():
    note("test_in_process")
"""
    )
    result = tester.runpytest("-p", "no:cacheprovider", "--cudagraph-gpus=2,")
    result.assert_outcomes(passed=9)
    assert all(devices == "2" for _, _, devices in _ran(tester))
    result.stdout.fnmatch_lines([f"cudagraph gpus: tests on 2 ({H100})"])


def test_off_gives_no_devices(fake_gpus: FakeGpus) -> None:
    tester = fake_gpus(H100, H100)
    tester.makepyfile(IN_WORKERS)
    result = tester.runpytest("-p", "no:cacheprovider", "-n", "2", "--cudagraph-gpus=off")
    result.assert_outcomes(passed=8)
    assert all(devices == "None" for _, _, devices in _ran(tester))
    assert nvml_asked(tester) == 0


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("--cudagraph-gpus=3", "--cudagraph-gpus: 3 GPUs asked for, the host has 2 GPUs (0, 1)"),
        ("--cudagraph-gpus=1,5", "--cudagraph-gpus: no device 5 on the host, which has 2 GPUs*"),
        ("--cudagraph-gpus=-2", "--cudagraph-gpus: expected auto, off, a positive number*"),
    ],
)
@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["session", "xdist"])
def test_devices_the_host_lacks_are_a_usage_error(
    fake_gpus: FakeGpus, given: str, message: str, xdist: list[str]
) -> None:
    tester = fake_gpus(H100, H100)
    tester.makepyfile(IN_WORKERS)
    result = tester.runpytest("-p", "no:cacheprovider", *xdist, given)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*ERROR: {message}"])


def test_a_dist_mode_without_workers_is_a_session_of_its_own(fake_gpus: FakeGpus) -> None:
    """``--dist`` without ``-n`` (an ini's ``addopts``, say): xdist runs the tests in the
    session's own process, and so does the plugin: explicit devices are that process's, and
    ``auto`` asks nothing."""
    tester = fake_gpus(H100, H100)
    tester.makepyfile(IN_WORKERS)
    result = tester.runpytest("-p", "no:cacheprovider", "--dist=loadscope", "--cudagraph-gpus=1,")
    result.assert_outcomes(passed=8)
    assert {devices for _, _, devices in _ran(tester)} == {"1"}
    (tester.path / "nvml.log").write_text("")
    result = tester.runpytest("-p", "no:cacheprovider", "--dist=loadscope")
    result.assert_outcomes(passed=8)
    assert nvml_asked(tester) == 0


def test_the_header_shares_the_devices_among_the_workers_xdist_starts(fake_gpus: FakeGpus) -> None:
    tester = fake_gpus(*[H100] * 4)
    tester.makepyfile(IN_WORKERS)
    result = tester.runpytest("-p", "no:cacheprovider", "-n", "4", "--maxprocesses=2")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["cudagraph gpus: *; gw0 on 0,1, gw1 on 2,3"])
    ran = _ran(tester)
    assert all(devices == {"gw0": "0,1", "gw1": "2,3"}[worker] for _, worker, devices in ran)


def test_a_markers_own_cuda_visible_devices_is_not_recorded_as_ours(fake_gpus: FakeGpus) -> None:
    tester = fake_gpus(H100, H100)
    tester.makepyfile(
        NOTE
        + """
@pytest.mark.cudagraph_subprocess(gpus=1, env={"CUDA_VISIBLE_DEVICES": "1"})
def test_its_own():
    note("test_its_own")
"""
    )
    result = tester.runpytest("-p", "no:cacheprovider", REPORT)
    result.assert_outcomes(passed=1)
    assert [devices for _, _, devices in _ran(tester)] == ["1"]
    assert records_by_name(tester.path / "r.json")["test_its_own"]["devices"] == []


@pytest.mark.parametrize(
    "xdist",
    [pytest.param([], id="session", marks=pytest.mark.wide), pytest.param(["-n", "2"], id="xdist")],
)
def test_gpus_that_cannot_be_counted_change_nothing_and_say_so(
    fake_gpus: FakeGpus, monkeypatch: pytest.MonkeyPatch, xdist: list[str]
) -> None:
    """NVML there but failing: no process is given devices, no ``gpus=K`` test is skipped (the
    test meets the devices it inherits), and a warning says why."""
    tester = fake_gpus(H100, H100)
    monkeypatch.setenv("FAKE_NVML_FAILS", "1")
    tester.makepyfile(GPUS_MARKED)
    result = tester.runpytest("-p", "no:cacheprovider", *xdist)
    result.assert_outcomes(passed=3)
    assert {devices for _, _, devices in _ran(tester)} == {"None"}
    if not xdist:  # a worker's warnings reach the controller's summary only with its report
        result.stdout.fnmatch_lines(["*the host's GPUs could not be counted*"])
