"""Whether a bundle's version fits this machine, and if not why: one answer for cells, commands and the notebook's
plan. The GPU is asked (which imports torch) only for a version that holds GPU kernels; each answer is kept for the
object's life, so one listing asks once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..storage.bundle import FieldMismatch, Manifest

if TYPE_CHECKING:
    from ..torch_adapter import fingerprint


@dataclass(frozen=True)
class Fit:
    """A version against this machine: `mismatches`, the blocking fields that differ (none when it fits); `checks`
    field by field (what `explain` shows)."""

    mismatches: tuple[FieldMismatch, ...]
    checks: list[fingerprint.FieldCheck]

    @property
    def fits(self) -> bool:
        return not self.mismatches


class MachineFit:
    def __init__(self, now: dict[str, Any] | None = None) -> None:
        """Against this machine, or the machine whose fingerprint is NOW (another node's, in a test)."""
        self._now: dict[bool, dict[str, Any]] = {} if now is None else {False: now, True: now}

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
        mismatches = tuple(FieldMismatch(c.field, c.saved, c.current) for c in checks if c.blocking and not c.ok)
        return Fit(mismatches, checks)

    def mismatches(self, manifest: Manifest) -> tuple[FieldMismatch, ...]:
        """The fields on which MANIFEST cannot restore here (none: it can): what storage's walk takes to pass over
        a version."""
        return self.of(manifest).mismatches

    def fits(self, manifest: Manifest) -> bool:
        return not self.mismatches(manifest)
