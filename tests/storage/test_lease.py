"""lease.py: single flight on every hub backend: one holder at a time, renewed while it lives, expired when it dies,
and an expired holder never releases what a collaborator took since (the hub's clock moved by the test)."""

from __future__ import annotations

import threading
import time

from helpers.hubs import hub_at

from jupyter_compile_cache.storage.backends.keys import braced
from jupyter_compile_cache.storage.lease import Lease


def test_lease_single_flight(clocked_hub):
    hub = clocked_hub.hub()
    mine = hub.lease("net", "f" * 12, "alice@a")
    assert mine.acquire() is None
    theirs = clocked_hub.hub().lease("net", "f" * 12, "bob@b")
    holder = theirs.acquire()
    assert holder["holder"] == "alice@a" and mine.held()
    mine.release()
    assert not mine.held()
    assert theirs.acquire() is None
    theirs.release()
    dead = hub.lease("net", "f" * 12, "carol@c")
    assert dead.acquire() is None
    dead._stop.set()  # the holder dies: no more renewals
    clocked_hub.pass_time(dead.ttl - 5)
    assert hub.lease("net", "f" * 12, "dave@d").acquire()["holder"] == "carol@c"
    clocked_hub.pass_time(6)  # past its ttl
    assert hub.lease("net", "f" * 12, "dave@d").acquire() is None


def test_a_lease_is_renewed_while_its_holder_lives(clocked_hub):
    hub = clocked_hub.hub()
    alive = Lease(hub.backend, hub._lease_key("net", "f"), "alice@a", ttl=60, clock=clocked_hub.clock)
    assert alive.acquire() is None
    for _ in range(3):  # 150 s in all, past its ttl
        clocked_hub.pass_time(50)  # a third of its ttl is due: its thread renews it, to 60 s again
        deadline = time.monotonic() + 30  # the renewal on its thread, however loaded the machine
        while clocked_hub.seconds_left(alive.key) < 30 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert clocked_hub.seconds_left(alive.key) > 30
    assert clocked_hub.hub().lease("net", "f", "bob@b").acquire()["holder"] == "alice@a"
    alive.release()


def test_an_expired_holder_never_releases_the_lease_a_collaborator_took_since(clocked_hub):
    hub = clocked_hub.hub()
    alice = Lease(hub.backend, hub._lease_key("net", "f"), "alice@a", ttl=60, clock=clocked_hub.clock)
    assert alice.acquire() is None
    alice._stop.set()  # stalled: no renewals
    clocked_hub.pass_time(61)
    bob = Lease(hub.backend, alice.key, "bob@b", clock=clocked_hub.clock)
    assert bob.acquire() is None
    alice.release()  # late
    assert bob.held() and clocked_hub.hub().lease("net", "f", "carol@c").acquire()["holder"] == "bob@b"
    bob.release()


def test_an_old_holder_never_releases_a_lease_a_collaborator_took_since_even_held_on_the_wire(redis_server):
    """Redis's release compares and deletes in one server-side step: held back on the wire (a slow network) until
    Alice's lease has expired and Bob has taken it, her release must leave Bob's lease alone."""
    from helpers.tcp_proxy import HoldingProxy

    proxy = HoldingProxy(redis_server.port)
    try:
        alice = Lease(hub_at(proxy.url).backend, "jcc:default/net:lease:f", "alice@a")
        assert alice.acquire() is None
        # Hold the request that removes the key (a DEL, or the script that compares and deletes).
        proxy.hold = lambda data: any(word in data.upper() for word in (b"\r\nDEL\r\n", b"UNLINK", b"EVAL"))
        releasing = threading.Thread(target=alice.release)
        releasing.start()
        assert proxy.held.wait(5), "the release never reached the wire"
        direct, key = redis_server.client(), braced(alice.key)  # the key as Redis holds it
        direct.pexpire(key, 1)  # Alice's lease expires (no renewals now): its time passes on the server
        deadline = time.monotonic() + 5
        while direct.exists(key) and time.monotonic() < deadline:
            time.sleep(0.01)
        bob = Lease(hub_at(redis_server.url).backend, alice.key, "bob@b")
        assert bob.acquire() is None
        proxy.let_go()
        releasing.join(10)
        assert direct.get(key) == bob.token.encode(), "Alice's late release deleted Bob's lease"
        bob.release()
        assert not direct.exists(key)
    finally:
        proxy.close()
