"""What only the S3 backend (s3://) has, against moto's real S3 protocol server: objects named by the key's parts
under the URL's prefix, listing that pages, credentials from the AWS variables (wrong, unknown, missing, read-only),
a bucket that is not there, the server killed mid-pull and mid-push, objects deleted under a reader. (The whole hub
suite runs on S3 too: tests/storage/test_hub.py.)"""

from __future__ import annotations

import time

import pytest
from helpers.hubs import hub_at, local_bundle, pull_bytes

from jupyter_compile_cache.storage.backends import check_url
from jupyter_compile_cache.storage.backends.object_store import ObjectStoreBackend
from jupyter_compile_cache.storage.hub import HubError, HubRefused
from jupyter_compile_cache.storage.sources import HubSource
from jupyter_compile_cache.storage.store import LocalStore


def _payload(store, manifest) -> bytes:
    with open(store.payload_path(manifest), "rb") as f:
        return f.read()


def test_keys_are_objects_under_the_prefix_named_by_their_quoted_parts(s3_server):
    bucket = s3_server.new_bucket()
    backend = ObjectStoreBackend(f"s3://{bucket}/teams/ml/")
    keys = ["jcc:team/ml/net:manifest:fp:v1", "jcc:team/ml/:name:net", "jcc:team/ml/net:chunk:fp:v1:0"]
    backend.put({key: key.encode() for key in keys})
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="teams/ml-other/jcc/x", Body=b"not ours")  # beside the prefix: not listed
    names = sorted(entry["Key"] for entry in client.list_objects_v2(Bucket=bucket)["Contents"])
    assert "teams/ml/jcc/team%2Fml%2Fnet/manifest/fp/v1" in names  # a namespace's '/' is no folder of its own
    assert sorted(backend.list("jcc:")) == sorted(keys)
    assert backend.list("jcc:team/ml/:name:") == ["jcc:team/ml/:name:net"]
    assert backend.list("jcc:team/ml/net:manifest:") == ["jcc:team/ml/net:manifest:fp:v1"]
    assert sorted(backend.list("jcc:team/m")) == sorted(keys)
    assert backend.get(keys) == [key.encode() for key in keys] and backend.missing(keys) == []


def test_listing_pages_through_many_objects(s3_server):
    """Listing follows S3's pages (1000 objects each) to the end (10,000 objects are timed in
    benchmarks/hub_backends.py, too slow on moto for every run)."""
    bucket = s3_server.new_bucket()
    backend = ObjectStoreBackend(f"s3://{bucket}/hub")
    keys = [f"jcc:ns/:name:n{i:04d}" for i in range(1050)]
    backend.put({key: b"" for key in keys})
    assert sorted(backend.list("jcc:ns/:name:")) == keys  # 2 pages
    assert len(backend.list("jcc:ns/:name:n009")) == 10


@pytest.mark.parametrize(
    "url, words",
    [
        ("s3://Team_Bucket/hub", "is not a bucket name"),
        ("s3://alice:s3cr3t-pw@bucket/hub", "credentials never go in the URL"),
        ("s3://bucket/hub?endpoint=http://x", "AWS_ENDPOINT_URL"),
        ("s3://", "is not a bucket name"),
    ],
)
def test_a_url_that_is_no_s3_hub_says_why_without_the_secret(url, words):
    with pytest.raises(ValueError, match=words) as caught:
        check_url(url)
    assert "s3cr3t-pw" not in str(caught.value)


def test_a_bucket_that_does_not_exist_is_one_clear_line(s3_server):
    with pytest.raises(HubError) as caught:
        hub_at("s3://no-such-bucket/hub").names()
    assert str(caught.value) == "hub s3://no-such-bucket/hub: the bucket 'no-such-bucket' does not exist"


def test_the_server_down_is_a_quick_hub_error(s3_server):
    hub = hub_at(f"s3://{s3_server.new_bucket()}/hub", connect_timeout=1.0, timeout=2.0)
    s3_server.kill()
    start = time.monotonic()
    with pytest.raises(HubError, match=r"http://127.0.0.1:\d+ .* \(is the server up, and the endpoint right\?\)"):
        hub.ping()
    assert time.monotonic() - start < 5  # no retry storm: two tries at most


def test_credentials_come_from_the_aws_variables_and_never_reach_a_message(s3_team, tmp_path):
    store, manifest = local_bundle(tmp_path)
    s3_team.be("writer")
    hub_at(s3_team.url).push(manifest, store.payload_path(manifest))
    secret = s3_team.keys["writer"][1]
    s3_team.be("writer", secret="wrong-" + secret)
    with pytest.raises(HubRefused) as wrong:
        hub_at(s3_team.url).versions("net")
    assert wrong.value.action == "log in" and "SignatureDoesNotMatch" in str(wrong.value)
    assert "a wrong key or secret" in str(wrong.value) and secret not in str(wrong.value)
    s3_team.server.client()  # nothing else changed: the writer's own key works again once set
    s3_team.be("writer")
    assert [m.version for m in hub_at(s3_team.url).versions("net")] == [manifest.version]


def test_no_credentials_at_all_is_one_line_naming_the_variables(s3_server, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    with pytest.raises(HubError, match="no S3 credential found: set AWS_PROFILE, or AWS_ACCESS_KEY_ID"):
        hub_at(f"s3://{s3_server.new_bucket()}/hub").names()


def test_a_read_only_credential_pulls_and_its_pushes_and_leases_are_refused(s3_team, tmp_path):
    store, manifest = local_bundle(tmp_path)
    s3_team.be("writer")
    hub_at(s3_team.url).push(manifest, store.payload_path(manifest))
    s3_team.be("reader")
    reader = hub_at(s3_team.url)
    [listed] = reader.versions("net")
    assert pull_bytes(reader, listed) == _payload(store, manifest)
    other_store, other = local_bundle(tmp_path, name="mine")
    with pytest.raises(HubRefused) as refused:
        reader.push(other, other_store.payload_path(other))
    assert refused.value.action == "write" and refused.value.denied
    assert "is not permitted to write 'default''s bundles" in str(refused.value)
    with pytest.raises(HubRefused):
        reader.lease("net", manifest.fingerprint_id, "bob@b").acquire()
    assert reader.names() == ["net"]  # nothing of the refused push became visible


def _fetch_failing(hub, manifest, tmp_path, during) -> LocalStore:
    """Fetch MANIFEST into a local store that holds another bundle, calling DURING at the first chunk; returns
    the store after the fetch failed with a HubError."""
    store = LocalStore(str(tmp_path / "receiving"))
    keep_store, keep = local_bundle(tmp_path, name="kept")
    with keep_store.open_payload(keep) as payload:
        store.adopt(keep, payload)
    calls = []

    def progress(done, total):
        if not calls:
            calls.append(done)
            during()

    with pytest.raises(HubError):
        HubSource(hub).fetch(manifest, store, progress)
    assert store.versions("net") == []  # nothing half there
    assert [m.version for m in store.versions("kept")] == [keep.version]
    with store.open_payload(store.versions("kept")[0]) as payload:
        assert payload.read() == _payload(keep_store, keep)  # and nothing lost
    return store


def test_the_server_killed_mid_pull_stores_nothing_and_loses_nothing(s3_server, tmp_path):
    store, manifest = local_bundle(tmp_path, size=4 << 20)
    hub = hub_at(f"s3://{s3_server.new_bucket()}/hub", connect_timeout=1.0, timeout=2.0)
    hub.push(manifest, store.payload_path(manifest))
    [listed] = hub.versions("net")
    _fetch_failing(hub, listed, tmp_path, s3_server.kill)


def test_objects_deleted_under_a_reader_store_nothing(s3_server, tmp_path):
    store, manifest = local_bundle(tmp_path, size=4 << 20)
    bucket = s3_server.new_bucket()
    hub = hub_at(f"s3://{bucket}/hub")
    hub.push(manifest, store.payload_path(manifest))
    [listed] = hub.versions("net")

    def delete_every_chunk():
        client = s3_server.client()
        for entry in client.list_objects_v2(Bucket=bucket, Prefix="hub/jcc/default%2Fnet/chunk/")["Contents"]:
            client.delete_object(Bucket=bucket, Key=entry["Key"])

    _fetch_failing(hub, listed, tmp_path, delete_every_chunk)


def test_the_server_killed_mid_push_publishes_nothing_and_the_local_store_keeps_the_bundle(s3_server, tmp_path):
    store, manifest = local_bundle(tmp_path, size=4 << 20)
    bucket = s3_server.new_bucket()
    hub = hub_at(f"s3://{bucket}/hub", connect_timeout=1.0, timeout=2.0)
    with pytest.raises(HubError):
        hub.push(manifest, store.payload_path(manifest), progress=lambda done, total: s3_server.kill())
    assert [m.version for m in store.versions("net")] == [manifest.version]
    s3_server.start()  # a new, empty server on the same port: the proxy reaches it again
    s3_server.client().create_bucket(Bucket=bucket)
    assert hub_at(f"s3://{bucket}/hub").versions("net") == []
    hub_at(f"s3://{bucket}/hub").push(manifest, store.payload_path(manifest))
    [listed] = hub_at(f"s3://{bucket}/hub").versions("net")
    assert pull_bytes(hub_at(f"s3://{bucket}/hub"), listed) == _payload(store, manifest)


def test_gc_during_a_push_leaves_its_chunks_and_a_later_push_of_a_killed_one_completes(s3_server, tmp_path):
    """Chunks on S3 carry no short expiry (rewriting one copies the object): a push's `pushing` key claims them.
    A gc while a push runs removes nothing of it, and the bundle it commits pulls back whole."""
    store, manifest = local_bundle(tmp_path, size=4 << 20)
    url = f"s3://{s3_server.new_bucket()}/hub"
    collected = []

    def gc_midway(done, total):
        if not collected:
            collected.append(hub_at(url).gc())

    hub_at(url).push(manifest, store.payload_path(manifest), progress=gc_midway)
    [listed] = hub_at(url).versions("net")
    assert collected == [[]] and pull_bytes(hub_at(url), listed) == _payload(store, manifest)
    assert not [key for key in hub_at(url).backend.list("jcc:") if ":pushing:" in key]  # gone with the commit


def test_a_profile_of_the_aws_files_is_read_through_boto3s_own_chain(s3_server, tmp_path, monkeypatch):
    """AWS_PROFILE names a profile of ~/.aws/credentials (obstore reads the variables only: boto3's chain reads the
    files); a profile that is not there is one line naming it."""
    bucket = s3_server.new_bucket()
    (tmp_path / "credentials").write_text("[team]\naws_access_key_id = test\naws_secret_access_key = test\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_PROFILE", "team")
    hub = hub_at(f"s3://{bucket}/hub")
    assert hub.names() == [] and hub.backend.credential == "AWS_PROFILE 'team'"
    monkeypatch.setenv("AWS_PROFILE", "nope")
    with pytest.raises(HubError, match=r"The config profile \(nope\) could not be found"):
        hub_at(f"s3://{bucket}/hub").names()
