"""The environment variables of torch that the plugin guards, reports and passes on: the one
filter that picks them, and a cheap stamp that tells whether they may have changed. Read by the
config snapshots (:mod:`..guard.state`), the settings, the report and the test processes'
controller."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

# The variables the leak guard guards and the report shows.
ENV_PREFIXES: Final = ("TORCHINDUCTOR_", "TORCHDYNAMO_", "TORCH_COMPILE")
# What every name in ENV_PREFIXES starts with, as ``os.environ`` stores names (bytes on POSIX).
_STORED_PREFIXES: Final = (b"TORCH", "TORCH")
_STORED_PREFIX_LENGTH: Final = len("TORCH")

EnvironStamp = list[tuple[bytes | str, bytes | str]]


def environ_stamp() -> EnvironStamp:
    """The variables whose names start with ``TORCH`` (every prefix torch reads), as
    ``os.environ`` stores them: equal stamps mean :func:`torch_env` is unchanged, and comparing
    them costs far less than decoding the environment (pytest also sets
    ``PYTEST_CURRENT_TEST`` each phase, which no stamp holds)."""
    stored = getattr(os.environ, "_data", None)
    items = stored.items() if isinstance(stored, dict) else os.environ.items()
    return [(k, v) for k, v in items if k[:_STORED_PREFIX_LENGTH] in _STORED_PREFIXES]


def torch_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (this process's by default) named by ``ENV_PREFIXES``,
    sorted by name."""
    items = (os.environ if environ is None else environ).items()
    return {k: v for k, v in sorted(items) if k.startswith(ENV_PREFIXES)}


def user_torch_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """:func:`torch_env` less what torch wrote there by itself (its default cache folder)."""
    found = torch_env(environ)
    if not found:  # nothing to ask torch's side about
        return found
    from . import env_sources

    return {k: v for k, v in found.items() if not env_sources.is_torch_env_memo(k, None, v)}


class UserEnvReader:
    """:func:`user_torch_env` of this process, cheap to call per test: made again only when its
    :func:`environ_stamp` changed."""

    def __init__(self) -> None:
        self._stamp: EnvironStamp | None = None
        self._found: dict[str, str] = {}

    def read(self) -> dict[str, str]:
        stamp = environ_stamp()
        if stamp != self._stamp:
            self._found = user_torch_env()
            self._stamp = stamp
        return dict(self._found)
