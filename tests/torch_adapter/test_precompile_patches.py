"""precompile_patches.py: installing the precompile guard wraps torch's precompile steps, each handing its call to
the guard; uninstalling puts every one of torch's functions back exactly as it was."""

from __future__ import annotations

import pytest

from jupyter_compile_cache.torch_adapter.precompile import PrecompileGuard

pytestmark = pytest.mark.skipif(not PrecompileGuard.available(), reason="a torch with Dynamo precompile (2.11+)")


def _torchs_steps() -> dict[str, object]:
    from torch._dynamo import convert_frame, guards, package

    return {
        "DynamoCache.load": package.DynamoCache.load,
        "DynamoCache.record_package": package.DynamoCache.record_package,
        "CompilePackage.install": package.CompilePackage.install,
        "CompilePackage.initialize": package.CompilePackage.initialize,
        "CompilePackage.add_inlined_source": package.CompilePackage.add_inlined_source,
        "CheckFunctionManager.__init__": guards.CheckFunctionManager.__init__,
        "load_guards_state": package.load_guards_state,
        "load_guard_manager": package.load_guard_manager,
        "recompilation reasons": getattr(convert_frame, "get_and_maybe_log_recompilation_reasons", None),
    }


def test_the_guard_wraps_each_of_torchs_precompile_steps_and_gives_them_back():
    # One guard wraps torch at a time: one installed here takes over from a session an earlier test left installed,
    # and its uninstall leaves torch's own functions.
    earlier = PrecompileGuard()
    earlier.install()
    earlier.uninstall()
    before = _torchs_steps()
    guard = PrecompileGuard()
    guard.install()
    try:
        during = _torchs_steps()
        wrapped = {name for name in before if before[name] is not None and during[name] != before[name]}
        assert wrapped == {name for name in before if before[name] is not None}, wrapped
        assert all(getattr(fn, "__module__", "").endswith("precompile_patches") for fn in during.values() if fn)
    finally:
        guard.uninstall()
    after = _torchs_steps()
    assert all(after[name] == before[name] for name in before), [n for n in before if after[n] != before[n]]
