"""Teams kept apart by the server's own access control: a real redis-server with ACL users made by the lines the docs
give (`acl_rule`). Every refusal is a HubRefused in the user's terms: whose bundles, read or write; never the
server's raw words, which quote key names."""

from __future__ import annotations

import pytest
from helpers.hubs import hub_at, local_bundle, pull_bytes

from jupyter_compile_cache.storage.backends.redis import acl_rule
from jupyter_compile_cache.storage.hub import HubRefused
from jupyter_compile_cache.storage.store import LocalStore


def _payload(store, manifest) -> bytes:
    with open(store.payload_path(manifest), "rb") as f:
        return f.read()


def _pushed(acl_hub, tmp_path, user="team-a", namespace="team-a", name="net", fp="f" * 12):
    store, manifest = local_bundle(tmp_path, size=1 << 20, name=name, fp=fp)
    hub_at(acl_hub.url(user), namespace=namespace).push(manifest, store.payload_path(manifest))
    return store, manifest


def test_every_key_of_a_namespace_starts_with_the_one_prefix_a_rule_names(acl_hub, tmp_path):
    _pushed(acl_hub, tmp_path)
    hub = hub_at(acl_hub.url("team-a"), namespace="team-a")
    lease = hub.lease("net", "f" * 12, "alice@a")
    assert lease.acquire() is None
    keys = [k.decode() for k in acl_hub.server.client().keys("*")]
    lease.release()
    assert keys and all(k.startswith("jcc:{team-a/") for k in keys), keys


def test_a_team_user_works_in_its_namespace_and_is_refused_anothers_in_its_terms(acl_hub, tmp_path):
    store, manifest = _pushed(acl_hub, tmp_path)
    mine = hub_at(acl_hub.url("team-a"), namespace="team-a")
    [listed] = mine.versions("net")
    assert pull_bytes(mine, listed) == _payload(store, manifest)
    _pushed(acl_hub, tmp_path, user="team-b", namespace="team-b", name="theirs")

    elsewhere = hub_at(acl_hub.url("team-a"), namespace="team-b")
    for attempt in (elsewhere.names, lambda: elsewhere.versions("theirs")):
        with pytest.raises(HubRefused) as refused:
            attempt()
        assert str(refused.value).endswith("user 'team-a' is not permitted to read 'team-b''s bundles")
        assert "jcc:" not in str(refused.value) and "pw-of" not in str(refused.value)
        assert refused.value.action == "read" and refused.value.denied
    with pytest.raises(HubRefused, match="not permitted to write 'team-b''s bundles"):
        elsewhere.push(manifest, store.payload_path(manifest))
    with pytest.raises(HubRefused, match="not permitted to write 'team-b''s bundles"):
        elsewhere.lease("theirs", "f" * 12, "alice@a").acquire()
    assert [k.decode() for k in acl_hub.server.client().keys("jcc:{team-b/theirs}*manifest*")]  # untouched


def test_a_read_only_user_pulls_and_its_pushes_and_leases_are_refused(acl_hub, tmp_path):
    store, manifest = _pushed(acl_hub, tmp_path)
    reader = hub_at(acl_hub.url("team-a-ro"), namespace="team-a")
    [listed] = reader.versions("net")
    mine = LocalStore(str(tmp_path / "reader-store"))
    with mine.receive(listed) as sink:
        reader.pull(listed, sink)
    assert [m.version for m in mine.versions("net")] == [manifest.version]
    other_store, other = local_bundle(tmp_path, size=1 << 20, name="mine")
    with pytest.raises(HubRefused) as refused:
        reader.push(other, other_store.payload_path(other))
    assert str(refused.value).endswith("user 'team-a-ro' is not permitted to write 'team-a''s bundles")
    with pytest.raises(HubRefused, match="not permitted to write"):
        reader.lease("net", "f" * 12, "ro@a").acquire()
    with pytest.raises(HubRefused, match="not permitted to write"):
        reader.remove("net")
    assert len(hub_at(acl_hub.admin_url, namespace="team-a").versions("net")) == 1  # nothing of team-a's lost


def test_a_wrong_password_is_one_refusal_that_names_the_user_and_never_the_password(acl_hub):
    hub = hub_at(acl_hub.url("team-a", password="not-the-pw-42"), namespace="team-a")
    with pytest.raises(HubRefused) as refused:
        hub.versions("net")
    assert refused.value.action == "log in" and "'team-a'" in str(refused.value)
    assert "not-the-pw-42" not in str(refused.value) and "***" in str(refused.value)


def test_a_listing_skips_what_the_user_may_not_read(acl_hub, tmp_path):
    """An admin may open only some of a namespace's bundles to a user: the listing shows those and names the rest
    as not readable, and a name whose versions are partly readable lists the readable ones."""
    admin = acl_hub.server.client()
    _pushed(acl_hub, tmp_path, name="open-net")
    _pushed(acl_hub, tmp_path, name="secret-net")
    _, readable = _pushed(acl_hub, tmp_path, name="mixed", fp="a" * 12)
    _pushed(acl_hub, tmp_path, name="mixed", fp="b" * 12)
    admin.execute_command(
        *f"ACL SETUSER guest reset on >pw-of-guest %R~jcc:{{team-a/}}:* %R~jcc:{{team-a/open-* "
        f"%R~jcc:{{team-a/mixed}}:*:{'a' * 12}:* -@all +@connection +info +scan +get +exists".split()
    )
    guest = hub_at(acl_hub.url("guest", "pw-of-guest"), namespace="team-a")
    manifests, refused = guest.listing()
    assert sorted((m.name, m.fingerprint_id) for m in manifests) == [("mixed", "a" * 12), ("open-net", "f" * 12)]
    assert refused == ["secret-net"]
    assert [m.version for m in guest.versions("mixed")] == [readable.version]


def test_the_documented_rules_are_the_ones_tested():
    assert acl_rule("team-a", "PASSWORD", "team-a") == (
        "ACL SETUSER team-a reset on >PASSWORD ~jcc:{team-a/* -@all "
        "+@connection +info +scan +get +exists +set +expire +persist +unlink +del +eval +multi +exec +discard"
    )
    assert acl_rule("team-a-ro", "PASSWORD", "team-a", read_only=True) == (
        "ACL SETUSER team-a-ro reset on >PASSWORD %R~jcc:{team-a/* -@all +@connection +info +scan +get +exists"
    )


def test_the_password_may_come_from_the_environment_and_the_urls_own_wins(acl_hub, monkeypatch):
    """`redis://team-a@host/0` in a notebook, the password in JUPYTER_COMPILE_CACHE_HUB_PASSWORD: nothing secret in
    the notebook, `%config` or any message."""
    without = acl_hub.url("team-a").replace(":pw-of-team-a@", "@")
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_HUB_PASSWORD", "pw-of-team-a")
    assert hub_at(without, namespace="team-a").names() == []
    assert hub_at(acl_hub.url("team-a"), namespace="team-a").names() == []  # the URL's own, right
    with pytest.raises(HubRefused) as refused:  # the URL's own, wrong: it wins over the environment's
        hub_at(acl_hub.url("team-a", password="wrong-pw-77"), namespace="team-a").names()
    assert refused.value.action == "log in" and "wrong-pw-77" not in str(refused.value)
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_HUB_PASSWORD", "wrong-pw-88")
    with pytest.raises(HubRefused, match="refused the login of user 'team-a'") as refused:
        hub_at(without, namespace="team-a").names()
    assert "wrong-pw-88" not in str(refused.value)
