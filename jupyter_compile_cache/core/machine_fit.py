"""Whether a bundle's version fits this machine, and if not why: one answer for cells, commands and the notebook's
plan. The GPU is asked (which imports torch) only for a version that holds GPU kernels; each answer is kept for the
object's life, so one listing asks once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..storage.bundle import Manifest

if TYPE_CHECKING:
    from ..torch_adapter import fingerprint


@dataclass(frozen=True)
class Fit:
    """A version against this machine: `reason` None when it fits; `checks` field by field (what `explain` shows)."""

    reason: str | None
    checks: list[fingerprint.FieldCheck]

    @property
    def fits(self) -> bool:
        return self.reason is None


class MachineFit:
    def __init__(self) -> None:
        self._now: dict[bool, dict[str, Any]] = {}

    def fingerprint(self, with_gpu: bool) -> dict[str, Any]:
        """This machine's fingerprint; `with_gpu` also names its GPU (torch imported)."""
        from ..torch_adapter import fingerprint  # here: a listing of an empty store needs no machine

        if with_gpu not in self._now:
            self._now[with_gpu] = fingerprint.current(with_gpu=with_gpu)
        return self._now[with_gpu]

    @property
    def gpu_asked(self) -> bool:
        """Whether the GPU was asked (torch imported for it) so far."""
        return True in self._now

    def of(self, manifest: Manifest) -> Fit:
        from ..torch_adapter import fingerprint

        now = self.fingerprint(manifest.uses_gpu)
        checks = fingerprint.compare(manifest.fingerprint, now, manifest.uses_gpu, manifest.uses_cpu_kernels)
        return Fit(fingerprint.mismatch_reason(checks), checks)

    def why_not(self, manifest: Manifest) -> str | None:
        """Why MANIFEST cannot restore here, or None: what storage's `find` takes to pass over a version."""
        return self.of(manifest).reason

    def fits(self, manifest: Manifest) -> bool:
        return self.why_not(manifest) is None
