"""session.py: the cell flow around torch, in this process (real files, a real store; nothing compiles here)."""

from __future__ import annotations

import os
import threading

import pytest
from helpers.store import make_bundle, restored_whole

from jupyter_compile_cache.core import events
from jupyter_compile_cache.core.options import CellOptions
from jupyter_compile_cache.core.records import RUN_BUILDS
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.failure import Failure
from jupyter_compile_cache.frontends import tables, wording
from jupyter_compile_cache.storage.sources import Place
from jupyter_compile_cache.torch_adapter import fingerprint


def _files(root):
    return {os.path.join(d, f): os.stat(os.path.join(d, f)).st_ino for d, _, fs in os.walk(root) for f in fs}


def test_restoring_then_running_the_cell_passes_over_the_bundle_once(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    make_bundle(session.store(), "twice", size=200_000, files=4, now=fingerprint.current())
    first = session.restore("twice", quiet=True)
    assert first.restored and first.files == 5
    extracted = _files(cache)
    with session.cell("twice", CellOptions(quiet=True, save=False)) as report:
        pass
    assert report.restore.restored and report.restore.version == first.version
    after = _files(cache)  # (the cell may add torch's CPU probe programs beside them)
    assert {p: after[p] for p in extracted} == extracted  # not written again: a new extraction makes new inodes

    # a file changed since (torch rewrote it, a user deleted it): that version is extracted again, whole
    victim = next(p for p in extracted if p.endswith("k1.so"))
    with open(victim, "ab") as f:
        f.write(b"changed")
    os.unlink(next(p for p in extracted if p.endswith("k2.so")))
    again = session.restore("twice", quiet=True)
    assert again.restored and restored_whole(list(extracted))
    assert _files(cache)[victim] != extracted[victim]
    session.close()


def test_a_cell_run_without_the_compiler_that_compiled_after_all_says_so_and_saves_nothing(tmp_path, monkeypatch):
    """The path a cell takes while the compiler loads, when its body does not look like it compiles and nothing is
    stored for it (tests/kernels/test_prewarm.py runs it in a kernel): a compile out of the cell's sight is told."""
    import io

    import torch

    from jupyter_compile_cache.frontends.reporter import TextReporter

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    err = io.StringIO()
    session = CompileCacheSession(store_dir=str(tmp_path / "store"), reporter=TextReporter(io.StringIO(), err))
    helper = torch.compile(lambda x: x.cos() + 1)
    session.prewarm.thread = threading.current_thread()  # the compiler still loading: its import not done
    with session.cell("sneaky", CellOptions(body="y = helper(x)")) as report:
        y = helper(torch.ones(3))
    session.prewarm.thread = None
    assert torch.equal(y, torch.ones(3).cos() + 1) and report.ok
    assert "'sneaky' compiled while torch's compiler was still loading" in err.getvalue(), err.getvalue()
    assert session.store().names() == [] and [r.name for r in session.history] == ["sneaky"]
    session.close()


def test_a_view_that_fails_is_told_once_and_the_cell_stands(tmp_path, monkeypatch):
    import io

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    err = io.StringIO()
    from jupyter_compile_cache.frontends.reporter import TextReporter

    session = CompileCacheSession(store_dir=str(tmp_path / "store"), reporter=TextReporter(io.StringIO(), err))
    seen = []

    def broken(event):
        seen.append(type(event).__name__)
        raise RuntimeError("the widget is gone")

    session.listeners.append(broken)
    for name in ("one", "two"):
        with session.cell(name, CellOptions(quiet=True)) as report:
            pass
        assert report.ok
    assert seen == ["CellFinished"] and session.listeners == []  # one event reached it, then it was dropped
    assert err.getvalue().count("a view of this session stopped updating (RuntimeError: the widget is gone)") == 1
    assert [r.name for r in session.history] == ["one", "two"]


def test_an_unreadable_manifest_beside_a_good_version_is_told_once_and_the_good_one_restores(tmp_path, monkeypatch):
    import io

    from jupyter_compile_cache.frontends.reporter import TextReporter
    from jupyter_compile_cache.storage.bundle import new_version_id

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    out, err = io.StringIO(), io.StringIO()
    session = CompileCacheSession(store_dir=str(tmp_path / "store"), reporter=TextReporter(out, err))
    good = make_bundle(session.store(), "net", now=fingerprint.current())
    broken = os.path.join(os.path.dirname(session.store().manifest_path(good)), new_version_id("f" * 12) + ".json")
    with open(broken, "w") as f:
        f.write("{not json")
    result = session.restore("net")
    assert result.restored and result.version == good.version
    assert err.getvalue().count("unreadable manifest, quarantined") == 1, err.getvalue()
    assert "restored 'net'" in out.getvalue()
    session.close()


# A cell in a process of its own (the script API: the same session and cell flow as the magic), for the faults that
# end a process: a file-size limit (RLIMIT_FSIZE) during the save, a SIGKILL during the save.
_FAULT_CELL = r"""
import os, resource, signal, sys, torch
import jupyter_compile_cache as jcc
from jupyter_compile_cache.core import events
from jupyter_compile_cache.core.options import CellOptions
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails with EFBIG instead of killing us
fault, hub = sys.argv[1], sys.argv[2]
def f(x):
    return (x * 3.0).sin() + x.cos()
x = torch.randn(64)
with jcc.cell("net", CellOptions(hub=hub, save=fault != "none")):
    y = torch.compile(f)(x)
    if fault == "full":  # the disk fills once the cell has computed: its save cannot write the pack
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
    elif fault == "kill":  # a big kernel file makes the save long enough to be killed in the middle of it
        big = os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "zz", "big.so")
        os.makedirs(os.path.dirname(big), exist_ok=True)
        with open(big, "wb") as out:
            out.write(os.urandom(400 << 20))
        print("SAVING", flush=True)
print("RIGHT", bool(torch.allclose(y, f(x), atol=1e-6)), flush=True)
"""


def _fault_env(tmp_path, who):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"cache-{who}"))
    env["JUPYTER_COMPILE_CACHE_DIR"] = str(tmp_path / "store")
    return env


def _run_cell(tmp_path, fault, who):
    """The cell in a process of its own, to its end."""
    import subprocess
    import sys

    command = [sys.executable, "-c", _FAULT_CELL, fault, f"file://{tmp_path / 'share'}"]
    return subprocess.run(command, env=_fault_env(tmp_path, who), capture_output=True, text=True, timeout=300)


def _whole_versions_only(store_root, share, check_dir):
    """The versions of 'net' in the store and on the folder hub, each checked whole: copied into a fresh store with
    every member's sha256 verified, and pulled from the hub with every chunk's."""
    from jupyter_compile_cache.storage.hub import Hub, HubConfig
    from jupyter_compile_cache.storage.sources import HubSource
    from jupyter_compile_cache.storage.store import LocalStore

    store = LocalStore(str(store_root))
    local = store.versions("net")
    for manifest in local:
        with store.open_payload(manifest) as payload:
            LocalStore(str(check_dir / "local")).adopt(manifest, payload)
    hub = HubSource(Hub(HubConfig(url=f"file://{share}")))
    remote = hub.versions("net")
    for manifest in remote:
        hub.fetch(manifest, LocalStore(str(check_dir / "hub")))
    return local, remote


def test_a_disk_that_fills_during_the_save_leaves_the_right_answer_one_line_and_no_version(tmp_path):
    share = tmp_path / "share"
    share.mkdir()
    done = _run_cell(tmp_path, "full", "a")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RIGHT True" in done.stdout
    told = [line for line in done.stderr.splitlines() if "could not save bundle 'net'" in line]
    assert len(told) == 1 and "the cell's result stands" in told[0], done.stderr[-3000:]
    assert ": a file size limit was reached;" in told[0] and "Errno" not in told[0], told[0]
    ran = [line for line in done.stdout.splitlines() + done.stderr.splitlines() if "'net' ran in" in line]
    assert len(ran) == 1 and "not saved (the warning says why)" in ran[0] and "nothing new" not in ran[0], ran
    local, remote = _whole_versions_only(tmp_path / "store", share, tmp_path / "check")
    assert local == [] and remote == []
    leftovers = [n for _, _, files in os.walk(tmp_path / "store") for n in files if n.startswith(".tmp-")]
    assert leftovers == []  # the half-written pack was removed


def test_a_kernel_killed_in_the_middle_of_its_save_leaves_no_version_and_the_next_one_saves_whole(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    share = tmp_path / "share"
    share.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", _FAULT_CELL, "kill", f"file://{share}"],
        env=_fault_env(tmp_path, "a"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "SAVING"
    deadline = time.time() + 60
    writing = []
    while not writing and time.time() < deadline and proc.poll() is None:
        writing = [n for _, _, files in os.walk(tmp_path / "store") for n in files if n.startswith(".tmp-")]
        time.sleep(0.005)
    assert writing, "the save never started writing its pack"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    local, remote = _whole_versions_only(tmp_path / "store", share, tmp_path / "check")
    assert local == [] and remote == []  # the half-written pack is no version

    done = _run_cell(tmp_path, "ok", "b")  # the next kernel: compiles, answers right, saves whole and pushes
    assert done.returncode == 0 and "RIGHT True" in done.stdout, done.stderr[-3000:]
    local, remote = _whole_versions_only(tmp_path / "store", share, tmp_path / "check")
    assert len(local) == 1 and len(remote) == 1


def test_a_pinned_version_is_the_one_restored_and_an_unknown_one_is_said(tmp_path, monkeypatch):
    from jupyter_compile_cache.storage.bundle import short_id

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    older = make_bundle(session.store(), "pinned", now=fingerprint.current())
    newer = make_bundle(session.store(), "pinned", now=fingerprint.current())
    assert session.restore("pinned", quiet=True).version == newer.version  # unpinned: the newest that fits
    pinned = session.restore("pinned", options=CellOptions(quiet=True, version=short_id(older.version)))
    assert pinned.version == older.version and not pinned.skipped  # the others are passed over, not "skipped"
    told: list[events.Event] = []
    session.listeners.append(told.append)
    missing = session.restore("pinned", options=CellOptions(version="zzzzzzz"))
    assert not missing.restored
    assert events.NotRestored("pinned", (), (), "zzzzzzz") in told, told
    session.close()


def test_a_failed_cell_counts_in_the_store_it_names(tmp_path, monkeypatch):
    # A cell that raised added its statistics to the default store, not to its own `--store DIR`.
    import pytest

    from jupyter_compile_cache.storage.store import LocalStore

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    session = CompileCacheSession(store_dir=str(tmp_path / "default"))
    mine = str(tmp_path / "mine")
    with pytest.raises(ZeroDivisionError):
        with session.cell("broken", CellOptions(quiet=True, store_dir=mine)):
            raise ZeroDivisionError("the body failed")
    assert LocalStore(mine).read_stats().counts["cells"] == 1
    assert LocalStore(str(tmp_path / "default")).read_stats().counts["cells"] == 0
    session.close()


def test_a_failure_of_ours_around_the_body_is_told_once_and_the_body_runs_as_without_us(tmp_path, monkeypatch):
    """A stage of ours that fails (here made to, before the body and after it) never reaches the user's cell: the
    body runs, the failure is one line, the cell's run is recorded, nothing half-made is saved."""
    import io

    import pytest
    import torch._dynamo.config as dynamo_config

    from jupyter_compile_cache.core import record_stage
    from jupyter_compile_cache.core.events import StoodAside
    from jupyter_compile_cache.frontends.reporter import TextReporter
    from jupyter_compile_cache.torch_adapter.precompile import PrecompileGuard

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    for before, said in ((True, "stood aside for 'net'"), (False, "was not saved")):
        err = io.StringIO()
        session = CompileCacheSession(store_dir=str(tmp_path / str(before)), reporter=TextReporter(io.StringIO(), err))

        def broken(*_args, **_kwargs):
            raise RuntimeError("ours broke")

        if before:  # the lease stage, before the body
            monkeypatch.setattr(session.hub_policy, "single_flight", broken)
        else:  # the record stage, after it
            monkeypatch.setattr(record_stage, "record", broken)
        told: list = []
        session.listeners.append(told.append)
        ran = []
        with session.cell("net", CellOptions()) as report:
            ran.append(bool(dynamo_config.caching_precompile))
        monkeypatch.undo()
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
        # precompile, our cells' switch, stays off for a body the cache stood aside from
        assert ran == [not before and PrecompileGuard.available()] and report.ok
        assert err.getvalue().count("(RuntimeError: ours broke)") == 1 and said in err.getvalue(), err.getvalue()
        stood_aside = [e for e in told if isinstance(e, StoodAside)]
        assert stood_aside == [StoodAside("net", before, Failure("RuntimeError", "ours broke"))]
        assert [r.name for r in session.history] == ["net"] and session.store().names() == []
        with pytest.raises(ZeroDivisionError):  # the user's own exception is still theirs
            with session.cell("net", CellOptions()):
                raise ZeroDivisionError
        assert [r.ok for r in session.history] == [True, False]
        session.close()


RANK = """
import os, sys
root = os.environ["TORCHINDUCTOR_CACHE_DIR"]
for rel in sys.argv[1:]:
    os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
    with open(os.path.join(root, rel), "wb") as f:
        f.write(b"built by a rank")
"""


@pytest.mark.parametrize("way", ["cell", "job"])
def test_kernels_ranks_retune_after_a_restore_are_kept_on_this_machine_and_installed_by_the_next(
    tmp_path, monkeypatch, way
):
    """torch re-tunes Triton kernels at run time in the processes a cell starts (max-autotune), whatever they
    restored: their new folders are no new version, but the next restore of NAME installs them. A job
    (`jupyter-compile-cache run`) restores while its processes start: what it installs then is no work of theirs."""
    import subprocess
    import sys

    store = str(tmp_path / "store")
    session = CompileCacheSession(store_dir=store)
    job = {"compiles_here": False, "restore_beside_body": True} if way == "job" else {}

    def cell(cache: str, *written: str):
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / cache))
        with session.cell("job", CellOptions(quiet=True, no_hub=True, **job)) as report:
            subprocess.run([sys.executable, "-c", RANK, *written], check=True)
        return report

    kernel = ["triton/0/{}/k.cubin", "triton/0/{}/__grp__k.json"]
    cold = cell("cold", "fxgraph/aa/key/0", *(k.format("FIRST") for k in kernel))
    assert cold.saved_version and cold.processes == 1
    retuned = cell("warm", *(k.format("RETUNED") for k in kernel))
    assert retuned.restore.restored and retuned.saved_version is None  # no new version for run-time builds
    assert (retuned.kernels_retuned, retuned.run_builds_kept) == (2, 1)
    assert "1 kernel kept on this machine for the next restore" in wording.cell_summary(retuned)
    later = cell("later", *(k.format("THIRD") for k in kernel))
    assert later.restore.run_builds == 2 and (later.kernels_retuned, later.run_builds_kept) == (2, 1)
    assert (tmp_path / "later" / "triton" / "0" / "RETUNED" / "k.cubin").read_bytes() == b"built by a rank"
    assert session.store().versions("job")[0].version == cold.saved_version

    removed = session.store().remove("job", dry_run=True)
    assert [r.version for r in removed] == [cold.saved_version, RUN_BUILDS]
    said = tables.removal_lines(removed, Place("local", store), dry_run=True)
    assert said[0].startswith("would remove 1 version from the local store") and "kernels built at run time" in said[2]
    session.store().remove("job")
    assert not (tmp_path / "store" / "run_builds" / "job").exists() and session.store().versions("job") == []
    session.close()
