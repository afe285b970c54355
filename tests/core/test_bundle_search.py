"""bundle_search.py: the one search every restore, pull and fetch goes through: the local store then the hub, the
version asked for, the newest that fits installed, and a hub that does not answer told, kept quiet or raised as the
caller asks (real stores, a real redis-server, a port where nothing listens)."""

from __future__ import annotations

import pytest
from helpers.store import make_bundle, restored_whole

from jupyter_compile_cache.core.bundle_search import BundleSearch
from jupyter_compile_cache.core.hub_policy import HubPolicy
from jupyter_compile_cache.core.options import CellOptions
from jupyter_compile_cache.core.records import CellReport
from jupyter_compile_cache.core.settings import CompileCache
from jupyter_compile_cache.storage import bundle, sources
from jupyter_compile_cache.storage.hub import HubError
from jupyter_compile_cache.storage.store import LocalStore
from jupyter_compile_cache.torch_adapter import fingerprint


class _Told(list):
    def __call__(self, event, report=None):
        self.append(event)


def _search(url: str) -> tuple[BundleSearch, _Told]:
    told = _Told()
    policy = HubPolicy(CompileCache(hub=url, hub_connect_timeout=0.5, hub_timeout=1.0), told)
    return BundleSearch(policy), told


@pytest.fixture(scope="module")
def here() -> dict:
    return fingerprint.current(with_gpu=False)


def test_the_newest_that_fits_is_installed_or_the_version_asked_for_the_rest_passed_over_with_why(
    tmp_path, redis_server, here
):
    store = LocalStore(str(tmp_path / "store"))
    older, newer = make_bundle(store, "net", now=here), make_bundle(store, "net", now=here)
    other_machine = make_bundle(store, "net", fp="e" * 12)  # the newest: made for another machine
    search, told = _search(redis_server.url)
    roots = {"inductor": str(tmp_path / "cache")}

    def install(manifest, payload):
        return bundle.extract(payload, manifest, roots)

    found = search.newest("net", store, None, install=install)
    assert found.manifest is not None and found.manifest.version == newer.version and found.source.kind == "local"
    assert restored_whole(found.installed)
    [skip] = found.skipped
    assert (skip.version, skip.kind) == (other_machine.version, sources.SkipKind.INCOMPATIBLE) and skip.mismatches

    pinned = search.newest("net", store, None, wanted=lambda m: m.version == older.version, install=install)
    assert pinned.manifest is not None and pinned.manifest.version == older.version
    assert [(s.version, s.kind) for s in pinned.skipped] == [
        (other_machine.version, sources.SkipKind.NOT_WANTED),
        (newer.version, sources.SkipKind.NOT_WANTED),
    ]
    assert told == []


def test_the_hub_alone_when_the_store_is_not_searched_and_next_time_it_is_local(tmp_path, redis_server, here):
    author = LocalStore(str(tmp_path / "author"))
    search, _told = _search(redis_server.url)
    hub = search.hub_policy.for_cell(CellOptions())
    assert hub is not None
    pushed = hub.push(make_bundle(author, "net", now=here), author)
    mine = LocalStore(str(tmp_path / "mine"))
    found = search.newest("net", mine, hub, local=False)
    assert found.source is hub and found.manifest.version == pushed.version
    again = search.newest("net", mine, hub)
    assert again.source.kind == "local" and again.manifest.version == pushed.version


def test_a_hub_that_does_not_answer_is_told_kept_for_the_next_cell_or_raised_as_asked(tmp_path, free_port):
    url = f"redis://127.0.0.1:{free_port}/0"
    store = LocalStore(str(tmp_path / "store"))

    search, told = _search(url)
    with pytest.raises(HubError):  # a command reports it itself
        search.newest("net", store, search.hub_policy.for_command(), on_down="raise")
    assert told == []

    report = CellReport("net")
    found = search.newest("net", store, search.hub_policy.for_command(), report=report)
    assert found.manifest is None and [type(e).__name__ for e in told] == ["HubUnavailable"]
    assert search.hub_policy.for_cell(CellOptions()) is None  # left alone: the next cell does not wait for it
    assert len(told) == 1

    quiet, told_quietly = _search(url)  # a background fetch: nothing told now, the next cell says it
    quiet.newest("net", store, quiet.hub_policy.for_command(), on_down="quiet")
    assert told_quietly == []
    assert quiet.hub_policy.for_cell(CellOptions()) is None
    assert [type(e).__name__ for e in told_quietly] == ["HubUnavailable"]
