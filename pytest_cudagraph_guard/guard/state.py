"""Snapshots of the guarded state (torch's config modules and environment), and a cheap check
that it is unchanged, for the leak guard and the thread marker (``threads.run``); what changed,
and putting it back, is :mod:`.diff`'s."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from .._torch import runtime
from .._torch.torch_env import environ_stamp, torch_env

if TYPE_CHECKING:
    from .._torch import values
    from ..torch_settings import StoredValues


class Snapshot:
    """The guarded state at one moment; a module absent from ``modules`` was not imported."""

    def __init__(self, env: dict[str, str], modules: dict[str, dict[str, values.RawEntry]]) -> None:
        self.env = env
        self.modules = modules

    @classmethod
    def take(cls) -> Snapshot:
        # Before torch is imported no config module is: the torch boundary's config part waits.
        if not runtime.torch_loaded():
            return cls(torch_env(), {})
        from .._torch import config_access

        configs = config_access.loaded_guarded_configs()
        return cls(torch_env(), {cfg.name: cfg.snapshot() for cfg in configs})


class QuickCheck:
    """An O(changes) test of "is the state still what ``Snapshot`` saw", for the hot path.

    It watches the config modules' own change counter (a default replaced counts too), torch's
    environment variables, which config modules are imported, and the values of mutable keys
    (changed in place; one that cannot be copied is named once by the snapshot, and only its
    replacement is seen).
    """

    def __init__(self, snapshot: Snapshot) -> None:
        self._stamp = environ_stamp()
        self._mutable: StoredValues | None = None
        # Without torch the environment is all there is to watch, and nothing of torch's loads.
        self._torch_free = not runtime.torch_loaded()
        if self._torch_free:
            return
        from .._torch import config_access, counting
        from ..torch_settings import StoredValues

        self._count = counting.change_count()
        self._modules = {
            name: sys.modules.get(name) for name in config_access.GUARDED_CONFIG_MODULES
        }
        mutable_readers = []
        for name, entries in snapshot.modules.items():
            cfg = config_access.loaded_config(name)
            if cfg is None:
                continue
            mutable_readers += [cfg.raw_reader(key) for key in cfg.mutable_keys(entries)]
        self._mutable = StoredValues(mutable_readers)

    def unchanged(self) -> bool:
        if self._torch_free:
            return not runtime.torch_loaded() and environ_stamp() == self._stamp
        return self._torch_unchanged()

    def _torch_unchanged(self) -> bool:
        from .._torch import counting

        if not counting.counts_every_change():
            return False  # the count proves nothing: the caller compares in full
        if counting.change_count() != self._count or environ_stamp() != self._stamp:
            return False
        for name, module in self._modules.items():
            if sys.modules.get(name) is not module:
                return False
        return self._mutable is None or self._mutable.unchanged()
