"""Dynamo precompile that never answers differently from plain torch.compile (the design: docs/how_it_works.md).

torch's caching_precompile drops the guards that compare object identity while it builds them. `PrecompileGuard`
lets torch build the guards twice, once as plain torch.compile does (for the live entry) and once the precompile
way (for what is saved), records the dropped guards with a digest of the code (code_digest.py), refuses a saved
entry whose code or objects changed, and gives a restored entry its dropped guards back as one identity check
(identity_checks.py). Any failure of torch's precompile machinery falls back to the plain path, told in one line.

One guard decides for four of torch's steps, each in its module around one state (precompile_state.py): building
guards (precompile_guards.py), loading an entry (precompile_load.py), installing it (precompile_install.py) and
saving (precompile_save.py). The patches that hand those steps to it are in precompile_patches.py; the records
beside the entries on disk in entry_records.py, which guards precompile drops in guard_policy.py, and what it
reports (miss reasons, failures) as data in miss_reasons.py.
"""

from __future__ import annotations

from . import precompile_patches
from .precompile_guards import GuardBuilding
from .precompile_install import EntryInstalling
from .precompile_load import EntryLoading
from .precompile_save import EntrySaving

# torch 2.10 has caching_precompile, but its saved entries fail to install (an IndexError, or code saved as a
# placeholder) and the plain path they fall back to then misses the FX graph and AOTAutograd caches: there, bundles
# carry those layers only, as before torch 2.9. Measured on the CPU; 2.11, 2.13 and 2.15 restore through precompile.
MIN_TORCH = "2.11.0a0"  # pre-releases of 2.11 included


_INSTALLED: PrecompileGuard | None = None  # the guard whose patches are on torch now


class PrecompileGuard(GuardBuilding, EntryLoading, EntryInstalling, EntrySaving):
    """Wraps torch's Dynamo precompile while installed; `uninstall` puts torch back exactly as it was."""

    def new_bypass_reasons(self) -> list[str]:
        """torch's reasons for functions it would not package since the last call, each reason once a session."""
        reasons, self._log_filter.bypass_reasons = self._log_filter.bypass_reasons, []
        return self._once(reasons)

    def new_unpackaged(self) -> list[str]:
        """Functions Dynamo compiled in a cell without a package since the last call (torch makes one when
        torch.compile is called, only while precompile is on): their names, "" for a module compiled through
        torch's own wrapper; each once a session."""
        names, self._unpackaged = self._unpackaged, []
        return self._once([f"unpackaged:{name}" for name in names], prefix="unpackaged:")

    @staticmethod
    def available() -> bool:
        try:
            import torch
            import torch._dynamo.config as dynamo_config
            from torch._dynamo import guards, package
        except Exception:  # no torch, or one without precompile: the plain path
            return False
        if torch.__version__ < MIN_TORCH:
            return False
        return (
            hasattr(dynamo_config, "caching_precompile")
            and hasattr(package, "DynamoCache")
            and hasattr(package, "load_guard_manager")
            and hasattr(package, "load_guards_state")
            and hasattr(guards, "CheckFunctionManager")
        )

    def install(self) -> None:
        global _INSTALLED
        if self.installed or not self.available():
            return
        if _INSTALLED is not None:
            # One guard wraps torch at a time (two sessions in one process: wrapping torch's wrapped functions
            # again breaks them): the session whose cell runs now. The other installs itself again at its next cell.
            _INSTALLED.uninstall()
        _INSTALLED = self
        self._patches = precompile_patches.wire(self)
        for logger in self._loggers:
            logger.addFilter(self._log_filter)
        self.installed = True

    def uninstall(self) -> None:
        global _INSTALLED
        if not self.installed:
            return
        if _INSTALLED is self:
            _INSTALLED = None
        for patch in reversed(self._patches):
            patch.undo()
        self._patches = []
        for logger in self._loggers:
            logger.removeFilter(self._log_filter)
        self.installed = False
