"""patch.py: one attribute replaced and put back exactly: an own attribute, an inherited one, a classmethod; and
the kernel-load fixes undo to what torch had (none apply where Triton is missing, as on the CI machine)."""

from __future__ import annotations

import importlib.util

from jupyter_compile_cache.torch_adapter import kernel_load_fixes
from jupyter_compile_cache.torch_adapter.patch import Patch


class Base:
    def inherited(self) -> str:
        return "base"


class Owner(Base):
    def own(self) -> str:
        return "own"

    @classmethod
    def made(cls) -> str:
        return cls.__name__


def test_a_patch_is_undone_exactly():
    own_before, made_before = vars(Owner)["own"], vars(Owner)["made"]
    patches = [
        Patch(Owner, "own", lambda self: "patched"),
        Patch(Owner, "inherited", lambda self: "patched"),
        Patch(Owner, "made", classmethod(lambda cls: "patched")),
    ]
    assert (Owner().own(), Owner().inherited(), Owner.made()) == ("patched", "patched", "patched")
    for patch in reversed(patches):
        patch.undo()
    assert vars(Owner)["own"] is own_before and vars(Owner)["made"] is made_before  # a classmethod stays one
    assert "inherited" not in vars(Owner) and Owner().inherited() == "base"


def test_kernel_load_fixes_undo_to_what_torch_had():
    told: list[kernel_load_fixes.LoadFixTrouble] = []
    patches = kernel_load_fixes.cache_load_patches(told.append)
    if importlib.util.find_spec("triton") is None:
        assert patches == []  # no Triton kernels to fix
    saved = [(p.owner, p.name, p.original) for p in patches]
    for patch in reversed(patches):
        patch.undo()
    for owner, name, original in saved:
        assert vars(owner).get(name, getattr(owner, name)) is original
    assert told == []
