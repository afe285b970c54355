"""Two collaborators in real kernels sharing one hub (a real redis-server, a Redis Cluster, S3, Azure, Google Cloud
Storage, https, a shared folder): separate stores, separate cache dirs."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pytest
from helpers.cells import COMPILE, DEFINE
from helpers.kernels import misses

from jupyter_compile_cache.storage.hub import Hub, HubConfig
from jupyter_compile_cache.storage.store import LocalStore

pytestmark = pytest.mark.slow
SESSION = "__import__('jupyter_compile_cache').get_session()"


def _collaborator(kernel_factory, tmp_path, who, hub_url, **env):
    store, cache = tmp_path / f"store_{who}", tmp_path / f"cache_{who}"
    store.mkdir(exist_ok=True)
    cache.mkdir(exist_ok=True)
    k = kernel_factory(
        TORCHINDUCTOR_CACHE_DIR=cache, JUPYTER_COMPILE_CACHE_DIR=store, JUPYTER_COMPILE_CACHE_HUB=hub_url, **env
    )
    k.run("%load_ext jupyter_compile_cache").check()
    k.run(DEFINE).check()
    return k


def _restores_whole_from(bob, url: str, backend: str) -> str:
    """BOB's compiling cell restored from the hub at URL with no misses and the eager answer, and `hub status`
    names the BACKEND; the cell's output."""
    out = bob.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout and "warning" not in out.stderr
    assert f"restored 'net' from the hub {url}" in out.stdout
    assert misses(bob.counters()) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}
    assert f"reachable ({backend}, " in bob.run("%compile_cache hub status").check().stdout
    return out.output


@pytest.mark.plain_kernels  # Alice's kernel probes the CPU itself (a forked one has it from its template)
def test_colleague_restores_from_a_cluster_hub_with_no_misses(kernel_factory, tmp_path, redis_cluster):
    # A 3-master Redis Cluster, Alice and Bob given different nodes' addresses. A single server is the path of the
    # other tests here and of example notebook 03.
    secret = {"JUPYTER_COMPILE_CACHE_SECRET": "team-secret"}
    alice_url, bob_url = redis_cluster.url(0), redis_cluster.url(2)
    alice = _collaborator(kernel_factory, tmp_path, "alice", alice_url, **secret)
    out = alice.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout and "saved" in out.stdout and "the hub" in out.stdout
    assert "warning" not in out.stderr  # on a cluster too (it once warned "Keys in request don't hash...")
    assert alice.counters()["inductor"]["fxgraph_cache_miss"] >= 1
    assert alice.value(f"len({SESSION}.prewarm.created)") > 0  # she built the CPU probe programs, and shared them

    bob = _collaborator(kernel_factory, tmp_path, "bob", bob_url, **secret)
    out = bob.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout and "warning" not in out.stderr
    assert f"restored 'net' from the hub {bob_url}" in out.stdout
    assert misses(bob.counters()) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}
    # Same CPU: Bob's kernel took the probe programs from the hub and built none
    assert bob.value(f"[{SESSION}.toolchain.source, {SESSION}.prewarm.created]") == ["hub", []]
    # written through: Bob's next kernel restores from his own local store
    assert LocalStore(str(tmp_path / "store_bob")).versions("net")
    status = bob.run("%compile_cache hub status").check().stdout
    assert "reachable" in status and "signed" in status
    assert "redis cluster" in status.lower()
    listing = repr(bob.run("%compile_cache list").check().results)
    assert "hub" in listing and "local" in listing


def test_colleague_restores_from_a_shared_folder_hub_with_no_misses(kernel_factory, tmp_path):
    """file://: a folder both kernels see (an NFS mount, a synced drive), no server at all."""
    share = tmp_path / "team-share"
    share.mkdir()
    url = f"file://{share}"
    alice = _collaborator(kernel_factory, tmp_path, "alice", url, JUPYTER_COMPILE_CACHE_SECRET="team-secret")
    out = alice.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout and "to the local store and the hub" in out.stdout
    assert "warning" not in out.stderr
    bob = _collaborator(kernel_factory, tmp_path, "bob", url, JUPYTER_COMPILE_CACHE_SECRET="team-secret")
    out = bob.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout and "warning" not in out.stderr
    assert f"restored 'net' from the hub {url}" in out.stdout
    assert misses(bob.counters()) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}
    assert "shared folder" in bob.run("%compile_cache hub status").check().stdout
    assert not [name for _, _, files in os.walk(share) for name in files if name.startswith("#")]  # no temp file


def test_wrong_team_secret_is_refused_the_cell_compiles_and_does_not_push(kernel_factory, tmp_path, redis_server):
    alice = _collaborator(kernel_factory, tmp_path, "alice", redis_server.url, JUPYTER_COMPILE_CACHE_SECRET="ours")
    alice.run(COMPILE.format(name="net", options="")).check()
    mallory = _collaborator(
        kernel_factory, tmp_path, "mallory", redis_server.url, JUPYTER_COMPILE_CACHE_SECRET="theirs"
    )
    out = mallory.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout
    said = out.stdout + out.stderr
    assert said.count("wrong signature") == 1, said  # one line says why, once
    assert mallory.counters()["inductor"]["fxgraph_cache_miss"] >= 1
    # What mallory compiled stays in mallory's store: the team would refuse a version signed with her secret.
    assert "not pushed 'net' to the hub" in out.stderr and "saved" in out.stdout
    assert LocalStore(str(tmp_path / "store_mallory")).versions("net")
    assert len(Hub(HubConfig(url=redis_server.url)).versions("net")) == 1  # alice's only


def test_hub_down_or_untrusted_warns_once_and_the_local_store_still_works(
    kernel_factory, tmp_path, free_port, tls_redis
):
    url = f"redis://user:pa55word@127.0.0.1:{free_port}/0"  # nothing listens there
    k = _collaborator(kernel_factory, tmp_path, "solo", url)
    out = k.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout and "saved" in out.stdout
    assert out.stderr.count("carrying on without the hub") == 1
    assert "pa55word" not in out.output
    assert LocalStore(str(tmp_path / "store_solo")).versions("net")  # local save kept
    again = k.run(COMPILE.format(name="other", options="")).check()
    assert "carrying on without the hub" not in again.stderr  # warned once, then skipped quickly

    # A TLS hub whose certificate this machine's CA file did not sign: `hub URL` does not take it (the hub before
    # stays), a cell that names it is refused, said once, and saves locally.
    untrusted = tls_redis.url_with(tls_redis.wrong_ca)
    told = k.run(f"%compile_cache hub {untrusted}").check()
    assert "not set: the hub's TLS certificate is not trusted" in told.stderr and "the hub stays" in told.stderr
    # forget the compiled model in memory, so the cell compiles (from torch's caches) and has files to save; before
    # torch 2.11 (no precompile) a cell that only reuses the in-memory model has nothing to save
    k.run("torch._dynamo.reset()").check()
    out = k.run(COMPILE.format(name="tls", options=f"--force-save --hub {untrusted}")).check()
    assert "MATCHES_EAGER True" in out.stdout and "saved" in out.stdout
    assert out.stderr.count("TLS certificate is not trusted") == 1 and "ssl_ca_certs" in out.stderr
    assert LocalStore(str(tmp_path / "store_solo")).versions("tls")
    assert tls_redis.client_tls().keys("*") == []  # nothing reached the hub


def test_second_collaborator_waits_for_the_first_ones_bundle(kernel_factory, tmp_path, redis_server):
    # Alice compiles locally (no hub yet); the test then plays her pushing while Bob waits on her lease.
    alice = _collaborator(kernel_factory, tmp_path, "alice", "off")
    alice.run(COMPILE.format(name="net", options="--no-hub")).check()
    store = LocalStore(str(tmp_path / "store_alice"))
    [manifest] = store.versions("net")
    hub = Hub(HubConfig(url=redis_server.url))
    lease = hub.lease("net", manifest.fingerprint_id, "alice@laptop")
    assert lease.acquire() is None

    bob = _collaborator(kernel_factory, tmp_path, "bob", redis_server.url)
    msg_id = bob.kc.execute(COMPILE.format(name="net", options="--wait 120"))
    stdout = ""
    pushed = False
    while True:
        msg = bob.kc.get_iopub_msg(timeout=300)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            stdout += msg["content"]["text"]
        if not pushed and "waiting up to" in stdout:  # Bob found Alice's lease and waits: now she pushes
            hub.push(manifest, store.payload_path(manifest))
            lease.release()
            pushed = True
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    bob.kc.get_shell_msg(timeout=60)
    assert "is being compiled by alice@laptop" in stdout and "waiting up to 120 s" in stdout
    assert "restored 'net' from the hub" in stdout and "MATCHES_EAGER True" in stdout
    assert misses(bob.counters())["fxgraph_cache_miss"] == 0


def test_torch_remote_points_torchs_own_redis_caches_at_the_hub(kernel_factory, tmp_path, redis_server):
    k = _collaborator(kernel_factory, tmp_path, "carol", redis_server.url)
    out = k.run(COMPILE.format(name="net", options="--torch-remote")).check()
    assert "MATCHES_EAGER True" in out.stdout
    assert k.value("__import__('torch._inductor.config').__dict__['_inductor'].config.fx_graph_remote_cache") is True
    keys = {key.decode() for key in redis_server.client().keys("pt2:*")}
    assert any("fx-graph" in key for key in keys), keys  # torch's FX graph remote cache wrote to the hub
    assert redis_server.client().keys("jcc:*")  # and so did our bundle


def test_team_users_under_acl_rules_restore_or_are_refused_in_their_terms(kernel_factory, tmp_path, acl_hub):
    """Redis ACL users made by the documented rules: a read-only user restores with no misses and its own bundle
    stays local (told once); another team's user gets nothing of team-a's (told once, no key names); a wrong
    password is told once. Every cell computes what eager does."""
    team = {"JUPYTER_COMPILE_CACHE_NAMESPACE": "team-a"}
    alice = _collaborator(kernel_factory, tmp_path, "alice", acl_hub.url("team-a"), **team)
    out = alice.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout and "to the local store and the hub" in out.stdout, out.output

    reader = _collaborator(kernel_factory, tmp_path, "reader", acl_hub.url("team-a-ro"), **team)
    out = reader.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout and "restored 'net' from the hub" in out.stdout, out.output
    assert misses(reader.counters()) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}
    said = []
    for name in ("mine", "mine2"):
        reader.run("torch._dynamo.reset()").check()
        out = reader.run(COMPILE.format(name=name, options="--force-save")).check()
        assert "MATCHES_EAGER True" in out.stdout and "saved" in out.stdout, out.output
        said.append(out.stderr)
    refusal = "user 'team-a-ro' is not permitted to write 'team-a''s bundles; bundles stay in the local store"
    assert refusal in said[0] and refusal not in said[1] and "jcc:" not in "".join(said), said
    assert LocalStore(str(tmp_path / "store_reader")).versions("mine2")
    listing = reader.run("%compile_cache list").check()
    assert "did not answer" not in listing.output and "'net'" not in listing.stderr  # the hub still lists

    bob = _collaborator(kernel_factory, tmp_path, "bob", acl_hub.url("team-b"), **team)
    out = bob.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout and "restored" not in out.stdout
    assert out.stderr.count("user 'team-b' is not permitted to read 'team-a''s bundles") == 1, out.stderr
    assert "jcc:" not in out.output and "pw-of" not in out.output
    wrong = acl_hub.url("team-b", password="not-the-pw-42")
    for name in ("p1", "p2"):
        bob.run("torch._dynamo.reset()").check()
        out = bob.run(COMPILE.format(name=name, options=f"--hub {wrong} --force-save")).check()
        assert "MATCHES_EAGER True" in out.stdout and "not-the-pw-42" not in out.output
        told = "the hub refused the login of user 'team-b'" in out.stderr
        assert told == (name == "p1"), out.stderr
    # no password in anything the kernels wrote: stores, their runs and statistics, torch's cache dirs
    written = [p for d in tmp_path.glob("*_*") if d.name.startswith(("store_", "cache_")) for p in d.rglob("*")]
    assert written and not [p for p in written if p.is_file() and b"pw-of-" in p.read_bytes()]


def test_colleague_restores_from_an_s3_hub_with_no_misses(kernel_factory, tmp_path, s3_team):
    """s3://: each kernel's credentials from its AWS variables (an IAM writer's and a reader's keys), moto's server;
    the reader restores with no misses, and her own bundle's push is refused in one line, kept in her store."""
    secret = {"JUPYTER_COMPILE_CACHE_SECRET": "team-secret"}
    alice = _collaborator(kernel_factory, tmp_path, "alice", s3_team.url, **secret, **s3_team.environ("writer"))
    out = alice.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout and "to the local store and the hub" in out.stdout
    assert "warning" not in out.stderr
    bob = _collaborator(kernel_factory, tmp_path, "bob", s3_team.url, **secret, **s3_team.environ("reader"))
    _restores_whole_from(bob, s3_team.url, "S3")
    bob.run("torch._dynamo.reset()").check()  # so the next cell compiles and has something to save
    out = bob.run(COMPILE.format(name="bobs", options="--force-save")).check()
    assert "MATCHES_EAGER True" in out.stdout
    assert out.stderr.count("is not permitted to write") == 1, out.stderr
    assert LocalStore(str(tmp_path / "store_bob")).versions("bobs")
    assert secret["JUPYTER_COMPILE_CACHE_SECRET"] not in out.output
    assert s3_team.keys["reader"][1] not in out.output and s3_team.keys["writer"][1] not in out.output


def test_a_bundle_saved_before_the_azure_hub_was_set_reaches_a_colleague(
    kernel_factory, tmp_path, azurite, monkeypatch
):
    """az://, Azurite: Alice saved 'net' with no hub; her next kernel, with the hub set, restores it from her store
    and pushes it (the hub lacked it), once; Bob's fresh kernel, with a read-only SAS token, restores it from the hub
    with no misses and the cold cell's answer."""
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas
    from helpers.azurite import ACCOUNT, KEY

    container = azurite.new_container()
    url = f"az://{container}/team-hub"
    secret = {"JUPYTER_COMPILE_CACHE_SECRET": "team-secret"}
    alone = _collaborator(kernel_factory, tmp_path, "alice", "off", **secret)
    out = alone.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout and "to the local store" in out.stdout and "the hub" not in out.stdout
    cold_answer = alone.value("y.tolist()")
    alone.shutdown()

    writer = {"AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string()}
    alice = _collaborator(kernel_factory, tmp_path, "alice", url, **secret, **writer)
    out = alice.run(COMPILE.format(name="net", options="")).check()
    assert "restored 'net' from the local store" in out.stdout and "warning" not in out.stderr
    assert "pushed the restored version to the hub, which lacked it" in out.stdout
    out = alice.run(COMPILE.format(name="net", options="")).check()
    assert "pushed" not in out.stdout  # asked once: the hub has it now
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string())
    assert [m.version for m in LocalStore(str(tmp_path / "store_alice")).versions("net")] == [
        m.version for m in Hub(HubConfig(url=url)).versions("net")
    ]

    token = generate_container_sas(
        ACCOUNT, container, account_key=KEY, permission=ContainerSasPermissions(read=True, list=True),
        expiry=datetime.now(timezone.utc) + timedelta(hours=1),
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{azurite.proxy.port}/{ACCOUNT}"
    reader = {"AZURE_STORAGE_CONNECTION_STRING": f"BlobEndpoint={endpoint};SharedAccessSignature={token}"}
    bob = _collaborator(kernel_factory, tmp_path, "bob", url, **secret, **reader)
    said = _restores_whole_from(bob, url, "Azure Blob Storage")
    assert bob.value("y.tolist()") == cold_answer
    assert token.split("sig=")[-1] not in said and KEY not in said


def test_a_colleague_restores_what_a_publisher_serves_over_https(kernel_factory, tmp_path, https_site):
    """https://, read-only: Alice's store published by the CLI into a folder a static https server serves; Bob's
    fresh kernel restores from it with no misses and the cold cell's answer, and his own bundle's push is refused in
    one line, kept in his store."""
    import subprocess
    import sys

    secret = {"JUPYTER_COMPILE_CACHE_SECRET": "team-secret"}
    alice = _collaborator(kernel_factory, tmp_path, "alice", "off", **secret)
    assert "MATCHES_EAGER True" in alice.run(COMPILE.format(name="net", options="")).check().stdout
    cold_answer = alice.value("y.tolist()")
    publish = [sys.executable, "-m", "jupyter_compile_cache", "--store", str(tmp_path / "store_alice"), "hub",
               "publish", str(tmp_path / "site" / "hub")]  # fmt: skip
    done = subprocess.run(publish, capture_output=True, text=True, env={**os.environ, **secret}, timeout=120)
    assert done.returncode == 0 and "pushed 'net'" in done.stdout, done.stderr

    bob = _collaborator(kernel_factory, tmp_path, "bob", https_site.url, SSL_CERT_FILE=https_site.ca, **secret)
    out = bob.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout and "warning" not in out.stderr
    assert f"restored 'net' from the hub {https_site.url}" in out.stdout
    assert misses(bob.counters()) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}
    assert bob.value("y.tolist()") == cold_answer
    bob.run("torch._dynamo.reset()").check()  # so the next cell compiles and has something to save
    out = bob.run(COMPILE.format(name="bobs", options="--force-save")).check()
    assert "MATCHES_EAGER True" in out.stdout
    assert out.stderr.count("an https hub is read-only") == 1, out.stderr
    assert LocalStore(str(tmp_path / "store_bob")).versions("bobs")


def test_s3_hub_faults_each_leave_the_cell_right_and_the_local_store_whole(kernel_factory, tmp_path, s3_server):
    """--torch-remote on an S3 hub (torch's caches speak Redis only), a bucket that is not there, then the server
    killed: each cell right, each one line, every bundle in the local store."""
    url = f"s3://{s3_server.new_bucket()}/hub"
    k = _collaborator(kernel_factory, tmp_path, "carol", url, **s3_server.environ())
    out = k.run(COMPILE.format(name="net", options="--torch-remote")).check()
    assert "MATCHES_EAGER True" in out.stdout and "saved" in out.stdout
    assert out.stderr.count("torch's caches stay on this machine") == 1, out.stderr
    assert k.value("__import__('os').environ.get('TORCHINDUCTOR_REDIS_URL')") is None
    for name, hub in (("missing", "s3://no-such-bucket/hub"), ("killed", f"s3://{s3_server.new_bucket()}/hub")):
        if name == "killed":
            s3_server.kill()
        k.run("torch._dynamo.reset()").check()  # so the cell compiles and has something to save
        out = k.run(COMPILE.format(name=name, options=f"--force-save --hub {hub}")).check()
        assert "MATCHES_EAGER True" in out.stdout and "saved" in out.stdout
        assert out.stderr.count("carrying on without the hub") == 1, out.stderr
        if name == "missing":
            assert "the bucket 'no-such-bucket' does not exist" in out.stderr
    store = LocalStore(str(tmp_path / "store_carol"))
    assert all(store.versions(name) for name in ("net", "missing", "killed"))


def test_colleagues_with_a_notebook_on_a_tls_hub_each_restore(kernel_factory, tmp_path, tls_redis):
    """A kernel that knows its notebook fetches its bundles in a staging thread while the prewarm fetches the CPU
    probe's and the cell restores its own: three threads of one kernel first using the hub's one backend at once.
    Each colleague restores (before, 2 of 7 compiled cold: 'the connection closed under a reply')."""
    import json

    notebook = tmp_path / "team.ipynb"
    cells = [{"cell_type": "code", "source": COMPILE.format(name="net", options=""), "metadata": {}, "outputs": []}]
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    secret = {"JUPYTER_COMPILE_CACHE_SECRET": "team-secret"}
    alice = _collaborator(kernel_factory, tmp_path, "alice", tls_redis.url, **secret)
    assert "the hub" in alice.run(COMPILE.format(name="net", options="")).check().stdout
    for who in ("bob",):  # the race itself is the hub suite's stress test; here, the kernel's threads for real
        colleague = _collaborator(
            kernel_factory, tmp_path, who, tls_redis.url, JPY_SESSION_NAME=str(notebook), **secret
        )
        out = colleague.run(COMPILE.format(name="net", options="")).check()
        assert "MATCHES_EAGER True" in out.stdout and "warning" not in out.stderr, out.stderr
        assert "restored 'net' from the local store, pulled from the hub when the kernel started" in out.stdout or (
            f"restored 'net' from the hub {tls_redis.url}" in out.stdout
        )
        assert misses(colleague.counters())["fxgraph_cache_miss"] == 0


def test_a_colleague_restores_from_a_google_cloud_storage_hub_with_no_misses(
    kernel_factory, tmp_path, gcs_server, monkeypatch
):
    """gs://, fake-gcs-server: Alice's bundle laid out in the bucket as her push lays it out (through the emulator's
    JSON API: it refuses the XML-API writes obstore makes, helpers/gcs_server.py), signed with the team's secret; Bob's
    fresh kernel, its service-account key file naming the server, restores it with no misses and the cold answer."""
    from helpers.gcs_server import JsonApiWrites

    url = f"gs://{gcs_server.new_bucket()}/team-hub"
    secret = {"JUPYTER_COMPILE_CACHE_SECRET": "team-secret"}
    alice = _collaborator(kernel_factory, tmp_path, "alice", "off", **secret)
    out = alice.run(COMPILE.format(name="net", options="")).check()
    assert "MATCHES_EAGER True" in out.stdout and "to the local store" in out.stdout
    cold_answer = alice.value("y.tolist()")
    alice.shutdown()
    store = LocalStore(str(tmp_path / "store_alice"))
    (manifest,) = store.versions("net")
    monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT_PATH", gcs_server.key_file)
    hub = Hub(HubConfig(url=url, secret=b"team-secret"), backend=JsonApiWrites(url, gcs_server))
    lease = hub.lease("net", manifest.fingerprint_id, "alice")  # single flight as a push takes it (conditional writes)
    assert lease.acquire() is None
    hub.push(manifest, store.payload_path(manifest))
    lease.release()

    bob = _collaborator(kernel_factory, tmp_path, "bob", url, **secret, **gcs_server.environ())
    _restores_whole_from(bob, url, "Google Cloud Storage")
    assert bob.value("y.tolist()") == cold_answer
