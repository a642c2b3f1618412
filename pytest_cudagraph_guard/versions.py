"""The versions and GPUs a session ran with, as one record type: the torch boundary fills it
(``_torch.release.versions``) and the report's environment (``core.records.Environment``) adds
the session's options to it. Standard library only, beneath every layer, so that both read it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Versions:
    """What a report says the session ran with (None: not installed or not known)."""

    python: str
    torch: str | None = None
    triton: str | None = None
    cuda: str | None = None
    driver: str | None = None
    gpus: list[str] = field(default_factory=list)
