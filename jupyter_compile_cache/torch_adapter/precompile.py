"""Dynamo precompile that never answers differently from plain torch.compile (the design: docs/how_it_works.md).

torch's caching_precompile drops the guards that compare object identity while it builds them. `PrecompileGuard`
lets torch build the guards twice, once as plain torch.compile does (for the live entry) and once the precompile
way (for what is saved), records the dropped guards with a digest of the code (code_digest.py), refuses a saved
entry whose code or objects changed, and gives a restored entry its dropped guards back as one identity check
(identity_checks.py). Any failure of torch's precompile machinery falls back to the plain path, told in one line.

One guard decides for four of torch's steps, each an object of its own module that owns its state: building guards
(precompile_guards.py), loading an entry (precompile_load.py), installing it (precompile_install.py) and saving
(precompile_save.py); how they fall back and tell is precompile_troubles.py. The patches that hand torch's calls
to those steps, with what each needs of the others, are in precompile_patches.py; the records beside the entries
on disk in entry_records.py, which guards precompile drops in guard_policy.py, and what it reports (miss reasons,
failures) as data in miss_reasons.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from . import precompile_patches
from .miss_reasons import MissReason, PrecompileTrouble
from .patch import Patch
from .precompile_guards import GuardBuilder
from .precompile_install import EntryInstaller
from .precompile_load import EntryLoader
from .precompile_save import EntrySaver
from .precompile_troubles import Troubles

# torch 2.10 has caching_precompile, but its saved entries fail to install (an IndexError, or code saved as a
# placeholder) and the plain path they fall back to then misses the FX graph and AOTAutograd caches: there, bundles
# carry those layers only, as before torch 2.9. Measured on the CPU; 2.11, 2.13 and 2.15 restore through precompile.
MIN_TORCH = "2.11.0a0"  # pre-releases of 2.11 included


_INSTALLED: PrecompileGuard | None = None  # the guard whose patches are on torch now


class PrecompileGuard:
    """Wraps torch's Dynamo precompile while installed; `uninstall` puts torch back exactly as it was."""

    def __init__(self, warn: Callable[[PrecompileTrouble], None] | None = None) -> None:
        self.installed = False
        self.troubles = Troubles(warn)
        self.guards = GuardBuilder(self.troubles)
        self.loader = EntryLoader(self.troubles, self.guards)
        self.installer = EntryInstaller(self.troubles, self.loader, self.guards)
        self.saver = EntrySaver(self.troubles, self.loader, self.guards)
        self._patches: list[Patch] = []

    @property
    def loaded_keys(self) -> set[str]:
        """Keys of the functions whose saved entries were handed to torch."""
        return self.loader.loaded_keys

    @property
    def lookups(self) -> list[str]:
        """The key of every function torch looked up, in order."""
        return self.loader.lookups

    def set_find_elsewhere(self, find: Callable[[str], bool] | None) -> None:
        """For the length of a cell: asked with a code digest no entry in the cache dir has, installs other
        versions' entries beside torch's and says whether it installed any."""
        self.loader.find_elsewhere = find

    def code_digests(self) -> dict[str, str]:
        """{qualified name: code digest} of the functions looked up since the last save."""
        return self.loader.code_digests()

    def take_miss_reasons(self) -> list[MissReason]:
        """Why functions were not restored since the last call, each once."""
        return self.troubles.take_miss_reasons()

    def save_cell_entries(
        self, context: Any, compiled: set[str], loaded_since: set[str], looked_up: Iterable[str]
    ) -> tuple[set[str], list[str]]:
        """A cell's entries and their records written to the cache dir (`EntrySaver.save_cell_entries`)."""
        return self.saver.save_cell_entries(context, compiled, loaded_since, looked_up)

    def refresh(self, paths: Iterable[str]) -> int:
        """Newer entries a restore wrote, installed into functions already live (`EntryInstaller.refresh`)."""
        return self.installer.refresh(paths) if self.installed else 0

    def new_bypass_reasons(self) -> list[str]:
        """torch's reasons for functions it would not package since the last call, each reason once a session."""
        log_filter = self.troubles.log_filter
        reasons, log_filter.bypass_reasons = log_filter.bypass_reasons, []
        return self.troubles.once(reasons)

    def new_unpackaged(self) -> list[str]:
        """Functions Dynamo compiled in a cell without a package since the last call (torch makes one when
        torch.compile is called, only while precompile is on): their names, "" for a module compiled through
        torch's own wrapper; each once a session."""
        names, self.guards.unpackaged = self.guards.unpackaged, []
        return self.troubles.once([f"unpackaged:{name}" for name in names], prefix="unpackaged:")

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
        self._patches = precompile_patches.wire(self.troubles, self.guards, self.loader, self.installer, self.saver)
        self.troubles.filtering(True)
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
        self.troubles.filtering(False)
        self.installed = False
