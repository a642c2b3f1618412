"""How the report reads the settings torch used, with no session: a process that never loaded
inductor reads its defaults once and keeps them in pytest's cache (here a mapping), from which
the next reader takes them without importing inductor; and what reads nothing where torch's
modules or variables are missing. tests/report/test_settings_store.py shows it across real
sessions."""

from __future__ import annotations

import sys

import pytest

from pytest_cudagraph_guard._torch import config_access, cudagraph_settings, observe
from pytest_cudagraph_guard._torch.torch_env import user_torch_env
from pytest_cudagraph_guard.torch_settings import SettingsReader

from ..helpers import PytestCache


def test_inductors_defaults_are_read_once_and_the_next_reader_takes_them_from_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(config_access, "loaded_config", lambda name: None)  # never compiled
    cache = PytestCache()
    first = SettingsReader(cache).read()
    assert first["triton.cudagraphs"].value is False
    assert len(cache) == 1
    assert SettingsReader().read() == first  # no cache to read from: read afresh

    def no_import(name: str) -> None:
        raise AssertionError(f"{name} imported where the cache had its defaults")

    monkeypatch.setattr(config_access, "import_config", no_import)
    assert SettingsReader(cache).read() == first
    monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE", "1")  # other variables: other defaults
    with pytest.raises(AssertionError, match="imported where the cache had its defaults"):
        SettingsReader(cache).read()


def test_without_torchs_modules_or_variables_there_is_nothing_to_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cudagraph_settings, "loaded_config", lambda name: None)
    assert cudagraph_settings.cudagraph_settings_here() == {}
    monkeypatch.delitem(sys.modules, "torch._dynamo.utils")
    assert observe.skip_count() == 0
    assert user_torch_env({"PATH": "/usr/bin"}) == {}
