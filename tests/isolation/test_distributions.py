"""The installed distributions' metadata, read once by the zygote: a test process's session start
is served that reading, which equals a fresh one, is dropped once anything on ``sys.path``
changed, and the test itself reads for itself. Real sessions, real processes."""

from __future__ import annotations

import importlib.metadata
import os
import time
from pathlib import Path

import pytest

from pytest_cudagraph_guard.isolation import distributions

SERVED_NAME = distributions.__name__


def _described(found: object) -> list[tuple[str, str, list[tuple[str, str, str]]]]:
    described = []
    for dist in found:  # type: ignore[attr-defined]
        points = sorted((point.group, point.name, point.value) for point in dist.entry_points)
        described.append((str(dist._path), dist.metadata["Name"], points))
    return sorted(described)


@pytest.mark.wide
def test_a_test_process_starts_its_session_on_the_zygotes_reading(
    ourtester: pytest.Pytester,
) -> None:
    """A conftest's ``pytest_configure`` runs while the session starts: there the test processes
    after the first are served the zygote's reading, and the tests themselves are not."""
    served_log = ourtester.path / "served.log"
    ourtester.makeconftest(
        f"""
import importlib.metadata, os
from pytest_cudagraph_guard.isolation import distributions as served

def pytest_configure(config):
    reading = served._Store.reading
    held = reading is not None and reading.where == served._where()
    with open({str(served_log)!r}, "a") as log:
        log.write(f"{{importlib.metadata.distributions.__module__}}:{{held}}\\n")
"""
    )
    ourtester.makepyfile(
        """
import importlib.metadata
import os
import pytest

@pytest.mark.parametrize("case", range(4))
def test_reads_for_itself(case):
    assert importlib.metadata.distributions.__module__ == "importlib.metadata"
    assert importlib.metadata.entry_points(group="pytest11")
"""
    )
    result = ourtester.runpytest("--cudagraph-subprocess")
    result.assert_outcomes(passed=4)
    seen = served_log.read_text().split()
    assert len(seen) == 5  # the session's own and each test process's
    assert seen.count(f"{SERVED_NAME}:True") >= 2, seen  # a reading it is served, as it holds


def test_the_reading_equals_a_fresh_one_and_is_dropped_when_sys_path_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    distributions.read_ahead(str(Path.cwd()))
    with distributions.served():
        assert importlib.metadata.distributions.__module__ == SERVED_NAME
        assert _described(importlib.metadata.distributions()) == _described(
            distributions._unserved()
        )
        eps = importlib.metadata.entry_points(group="pytest11")
        assert eps
    assert importlib.metadata.distributions.__module__ == "importlib.metadata"
    distributions.read_ahead(str(Path.cwd()))
    with distributions.served():
        before = tmp_path.stat().st_mtime_ns
        while time.time_ns() < before + 50_000_000:  # past the folder time's granularity
            time.sleep(0.01)
        info = tmp_path / "newcomer-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: newcomer\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("[pytest11]\nnewcomer = newcomer_plugin\n")
        names = {point.name for point in importlib.metadata.entry_points(group="pytest11")}
        assert "newcomer" in names
        assert names > {point.name for point in eps}


def test_the_reading_is_for_the_test_processes_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = Path.cwd()
    distributions.read_ahead(str(tmp_path))
    try:
        assert Path.cwd() == here  # the zygote's own folder, back
        reading = distributions._Store.reading
        assert reading is not None
        assert reading.where[0] == os.path.realpath(tmp_path)
        assert reading.where != distributions._where()  # not this folder's
        monkeypatch.chdir(tmp_path)
        assert reading.where == distributions._where()  # the test process's
    finally:
        distributions.stop_serving()
