"""What only the object-store backend (gs://, az://, through obstore) has, against Azurite, Azure's own emulator:
credentials found as Azure's tools find them (a connection string, an account key, a SAS token; none), a read-only
SAS token, a container that is not there, the server down mid-pull. Each failure is one line naming what to set, never
a secret. (The whole hub suite runs on Azure too: tests/storage/test_hub.py.) fake-gcs-server serves obstore's GCS
reads but not its writes: a colleague's restore from gs:// is tests/core/test_hub_kernels.py; here, GCS's credentials
and messages."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pytest
from helpers.azurite import ACCOUNT, KEY
from helpers.hubs import hub_at, local_bundle, pull_bytes

from jupyter_compile_cache.storage.backends import check_url
from jupyter_compile_cache.storage.hub import HubError, HubRefused
from jupyter_compile_cache.storage.sources import HubSource
from jupyter_compile_cache.storage.store import LocalStore

CLOUD_VARIABLES = ("AZURE_", "GOOGLE_", "CLOUDSDK_")


@pytest.fixture
def no_cloud_credentials(monkeypatch, tmp_path):
    """No cloud variable, and a home without gcloud's application-default file."""
    for name in list(os.environ):
        if name.startswith(CLOUD_VARIABLES):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no `az` CLI to ask


def _payload(store, manifest) -> bytes:
    with open(store.payload_path(manifest), "rb") as f:
        return f.read()


@pytest.mark.parametrize(
    "url, words",
    [
        ("gs://Bucket/hub", "the bucket 'Bucket' is not a bucket name"),
        ("az://a/hub", "the container 'a' is not a container name"),
        ("az://team--hub/x", "is not a container name"),
        ("az://user:s3cr3t@team/hub", "credentials never go in the URL: set AZURE_STORAGE_CONNECTION_STRING"),
        ("gs://team/hub?key=s3cr3t", "credentials come from GOOGLE_APPLICATION_CREDENTIALS"),
    ],
)
def test_a_url_that_is_no_cloud_hub_says_why_without_the_secret(url, words):
    with pytest.raises(ValueError, match=words) as refused:
        check_url(url)
    assert "s3cr3t" not in str(refused.value)


def test_no_credential_is_one_line_naming_what_would_supply_it(no_cloud_credentials):
    with pytest.raises(HubError) as azure:
        hub_at("az://team-hub/x").names()
    assert "no Azure storage account: set AZURE_STORAGE_CONNECTION_STRING" in str(azure.value)
    os.environ["AZURE_STORAGE_ACCOUNT"] = "team"
    with pytest.raises(HubError, match=r"no Azure Blob Storage credential found: .* or run `az login`"):
        hub_at("az://team-hub/x").names()
    with pytest.raises(HubError, match=r"no Google Cloud Storage credential found: set GOOGLE_APPLICATION_CREDENTIALS"):
        hub_at("gs://team-hub/x").names()
    os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = "/nowhere/key.json"
    with pytest.raises(HubError, match="could not start: Unable to open service account file from /nowhere/key.json"):
        hub_at("gs://team-hub/x").names()


def test_a_wrong_key_a_missing_container_and_a_server_down_are_each_one_clear_line(azurite, no_cloud_credentials):
    container = azurite.new_container()
    wrong = "A" * 8 + KEY[8:]
    os.environ["AZURE_STORAGE_CONNECTION_STRING"] = azurite.connection_string(key=wrong)
    with pytest.raises(HubRefused) as refused:
        hub_at(f"az://{container}/hub").names()
    assert refused.value.action == "log in" and wrong not in str(refused.value)
    assert "refused the credential from AZURE_STORAGE_CONNECTION_STRING" in str(refused.value)
    os.environ["AZURE_STORAGE_CONNECTION_STRING"] = azurite.connection_string()
    with pytest.raises(HubError, match="the container 'no-such-container' does not exist"):
        hub_at("az://no-such-container/hub").names()
    azurite.stop()
    with pytest.raises(HubError, match="refused the connection .is the server up, and the endpoint right"):
        hub_at(f"az://{container}/hub", connect_timeout=1.0, timeout=2.0).names()


def test_a_read_only_sas_token_pulls_and_its_pushes_and_leases_are_refused(azurite, no_cloud_credentials, tmp_path):
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    container = azurite.new_container()
    url = f"az://{container}/hub"
    os.environ["AZURE_STORAGE_CONNECTION_STRING"] = azurite.connection_string()
    store, manifest = local_bundle(tmp_path)
    hub_at(url).push(manifest, store.payload_path(manifest))
    token = generate_container_sas(
        ACCOUNT, container, account_key=KEY, permission=ContainerSasPermissions(read=True, list=True),
        expiry=datetime.now(timezone.utc) + timedelta(hours=1),
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{azurite.proxy.port}/{ACCOUNT}"
    os.environ["AZURE_STORAGE_CONNECTION_STRING"] = f"BlobEndpoint={endpoint};SharedAccessSignature={token}"
    reader = hub_at(url)
    [listed] = reader.versions("net")
    assert pull_bytes(reader, listed) == _payload(store, manifest)
    other_store, other = local_bundle(tmp_path, name="mine")
    with pytest.raises(HubRefused) as refused:
        reader.push(other, other_store.payload_path(other))
    assert refused.value.action == "write" and refused.value.denied and "sig=" not in str(refused.value)
    with pytest.raises(HubRefused):
        reader.lease("net", manifest.fingerprint_id, "bob@b").acquire()
    assert reader.names() == ["net"]  # nothing of the refused push became visible


def test_the_server_stopped_mid_pull_stores_nothing_and_loses_nothing(azurite, no_cloud_credentials, tmp_path):
    os.environ["AZURE_STORAGE_CONNECTION_STRING"] = azurite.connection_string()
    store, manifest = local_bundle(tmp_path, size=4 << 20)
    hub = hub_at(f"az://{azurite.new_container()}/hub", connect_timeout=1.0, timeout=2.0)
    hub.push(manifest, store.payload_path(manifest))
    [listed] = hub.versions("net")
    receiving = LocalStore(str(tmp_path / "receiving"))
    calls = []

    def progress(done, total):
        if not calls:
            calls.append(done)
            azurite.stop()

    with pytest.raises(HubError):
        HubSource(hub).fetch(listed, receiving, progress)
    assert receiving.versions("net") == []
