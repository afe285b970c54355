"""hub_policy.py: which hub a cell gets, how a failing hub is told (once) and left alone (a minute), the hub's state
and the single-flight lease, against a real redis-server and a port where nothing listens."""

from __future__ import annotations

import socket
import time

from jupyter_compile_cache.core.events import HubUnavailable, NoTeamSecret
from jupyter_compile_cache.core.hub_policy import ANSWER_SECONDS, HubPolicy, hub_config
from jupyter_compile_cache.core.options import CellOptions
from jupyter_compile_cache.core.records import CellReport
from jupyter_compile_cache.core.settings import CompileCache
from jupyter_compile_cache.storage.hub import HubError


class _Told(list):
    """The events the policy told, in order."""

    def __call__(self, event, report=None):
        self.append(event)


def _policy(url: str, secret: str = "team") -> tuple[HubPolicy, _Told, _Told]:
    settings = CompileCache(hub=url, secret=secret, hub_connect_timeout=0.5, hub_timeout=1.0)
    told = _Told()
    return HubPolicy(settings, told), told, told


def test_a_hub_that_fails_is_told_once_then_left_alone_for_a_minute(free_port):
    policy, warnings, _out = _policy(f"redis://127.0.0.1:{free_port}/0")
    assert policy.for_cell(CellOptions()) is None  # nothing listens: the cell's ping fails, the cell goes on without
    assert len(warnings) == 1 and isinstance(warnings[0], HubUnavailable), warnings
    assert warnings[0].hub.endswith(f":{free_port}/0")
    assert policy.for_cell(CellOptions()) is None and len(warnings) == 1  # down: not asked or told again for a minute
    hub = policy.for_command()  # a command tries it anyway, and reports its own failure
    assert hub is not None
    try:
        hub.names()
    except HubError as exc:
        failure = exc
    report = CellReport("cell")
    policy.failed(hub, failure, report)  # a second failure of the same hub: in the report, not told again
    assert len(warnings) == 1 and report.warnings == [HubUnavailable(hub.display_url, str(failure))]
    state = policy.state()
    assert state.reachable is False and "not retried yet" in state.error
    forced = policy.state(force=True)  # `hub status` pings anyway
    assert forced.reachable is False and forced.error != state.error


def test_a_hub_that_takes_connections_and_never_answers_costs_a_cell_two_seconds():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # the kernel accepts connections; nothing ever answers
    try:
        policy, warnings, _out = _policy(f"redis://127.0.0.1:{listener.getsockname()[1]}/0")
        policy.settings.hub_timeout = 10.0  # the read timeout a pull waits out, chunk by chunk
        start = time.monotonic()
        assert policy.for_cell(CellOptions()) is None
        waited = time.monotonic() - start
        assert ANSWER_SECONDS <= waited < ANSWER_SECONDS + 2, waited  # the ping's wait, never the read timeout
        assert len(warnings) == 1 and f"no answer within {ANSWER_SECONDS:g} s" in warnings[0].reason, warnings
        assert policy.for_cell(CellOptions()) is None and len(warnings) == 1  # left alone for a minute
    finally:
        listener.close()


def test_a_failure_in_the_background_is_told_by_the_next_cell_that_would_use_the_hub(free_port):
    policy, warnings, _out = _policy(f"redis://127.0.0.1:{free_port}/0")
    assert policy.for_toolchain() is None  # its ping failed in a background thread: nothing printed there
    assert warnings == []
    assert policy.for_cell(CellOptions()) is None
    assert len(warnings) == 1 and isinstance(warnings[0], HubUnavailable)
    assert policy.for_cell(CellOptions()) is None and len(warnings) == 1


def test_no_hub_no_secret_and_the_hubs_state(redis_server):
    policy, warnings, _out = _policy("")
    assert policy.for_cell(CellOptions()) is None and policy.state().url is None
    assert policy.for_cell(CellOptions(hub=redis_server.url)) is not None  # a cell's --hub wins
    policy, warnings, _out = _policy(redis_server.url, secret="")
    assert policy.for_cell(CellOptions(no_hub=True)) is None
    hub = policy.for_cell(CellOptions())
    assert warnings == []  # listing or checking a hub says nothing of trust
    policy.trust(hub, None)  # a bundle moves: said once a session
    policy.trust(policy.for_cell(CellOptions()), None)
    assert warnings == [NoTeamSecret()]
    state = policy.state()
    assert state.reachable and not state.signed and state.kind == "redis" and state.latency_ms is not None
    assert state.namespace == "default"


def test_one_collaborator_holds_the_lease_the_other_compiles_too(redis_server):
    alice, _, _ = _policy(redis_server.url)
    bob, _, bob_out = _policy(redis_server.url)
    opts = CellOptions()
    hub_a, hub_b = alice.for_cell(opts), bob.for_cell(opts)
    lease = alice.single_flight(hub_a, "net", "fp", "alice@a", opts, CellReport("net"), lambda: None)
    assert lease is not None and lease.held()
    assert bob.single_flight(hub_b, "net", "fp", "bob@b", opts, CellReport("net"), lambda: None) is None
    [said] = bob_out
    assert (said.name, said.holder, said.wait_seconds) == ("net", "alice@a", 0.0)  # compiling here too
    lease.release()
    assert not lease.held()
    alice.close()
    bob.close()


def test_the_chunk_size_setting_reaches_the_hub_and_pushes_in_chunks_of_that_size(tmp_path, redis_server):
    from helpers.store import make_bundle

    from jupyter_compile_cache.storage.hub import Hub
    from jupyter_compile_cache.storage.store import LocalStore

    config = hub_config(CompileCache(hub=redis_server.url, hub_chunk_size="256K"))
    assert config is not None and config.chunk_size == 256 << 10
    store = LocalStore(str(tmp_path / "store"))
    manifest = make_bundle(store, "net", size=1 << 20)
    pushed = Hub(config).push(manifest, store.payload_path(manifest))
    assert pushed.chunk_size == 256 << 10 and len(pushed.chunk_sha256) == -(-manifest.payload_bytes // (256 << 10))


def test_a_cells_push_is_timed(tmp_path, redis_server):
    from helpers.store import make_bundle

    from jupyter_compile_cache.storage.store import LocalStore

    policy, warnings, _out = _policy(redis_server.url)
    store = LocalStore(str(tmp_path / "store"))
    manifest = make_bundle(store, "net", size=1 << 20)
    report = CellReport("net", saved_version=manifest.version, saved_bytes=manifest.payload_bytes, saved_files=3)
    policy.push(policy.for_cell(CellOptions()), store, manifest, report)
    assert warnings == [] and report.pushed and 0 < report.push_seconds < 60  # timed (a loaded CI is slow)
