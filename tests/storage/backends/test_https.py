"""The read-only https:// hub (storage/backends/https.py) against a real static https server (Python's http.server
over TLS, a CA made by openssl): what `hub publish DIR` wrote is pulled byte for byte and verified; a push, a lease
and `hub gc` are refused in one line; a certificate not trusted, a server down, a folder without a listing, a
damaged chunk and another team's secret are each one clear line, and the local store keeps what it had."""

from __future__ import annotations

import json
import os

import pytest
from helpers.hubs import hub_at, local_bundle, pull_bytes

from jupyter_compile_cache.frontends import cli
from jupyter_compile_cache.storage.backends import check_url
from jupyter_compile_cache.storage.backends.https import INDEX
from jupyter_compile_cache.storage.hub import HubError, HubRefused
from jupyter_compile_cache.storage.signing import SignatureError
from jupyter_compile_cache.storage.sources import HubSource
from jupyter_compile_cache.storage.store import LocalStore


def _published(tmp_path, monkeypatch, capsys, secret="team-secret", names=("net", "mlp")) -> LocalStore:
    """A store holding NAMES, published into site/hub by the CLI, as a publisher would."""
    mine = LocalStore(str(tmp_path / "mine"))
    for name in names:
        store, manifest = local_bundle(tmp_path, size=900 << 10, name=name)
        with store.open_payload(manifest) as payload:
            mine.adopt(manifest, payload)
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_SECRET", secret)
    assert cli.main(["--store", mine.root, "hub", "publish", str(tmp_path / "site" / "hub")]) == 0
    out = capsys.readouterr().out
    assert all(f"pushed {name!r} version" in out for name in names)
    assert f"wrote the listing {tmp_path / 'site' / 'hub' / INDEX}: serve {tmp_path / 'site' / 'hub'}" in out
    return mine


def _payload(store, manifest) -> bytes:
    with store.open_payload(manifest) as payload:
        return payload.read()


def test_what_publish_wrote_is_pulled_whole_and_verified(https_site, tmp_path, monkeypatch, capsys):
    mine = _published(tmp_path, monkeypatch, capsys)
    hub = hub_at(https_site.url, secret=b"team-secret")
    assert sorted(hub.names()) == ["mlp", "net"]
    for name in ("net", "mlp"):
        [listed], [local] = hub.versions(name), mine.versions(name)
        assert listed.version == local.version and pull_bytes(hub, listed) == _payload(mine, local)
    # a publish again adds what is new and keeps what was there
    store, newer = local_bundle(tmp_path, name="cnn")
    with store.open_payload(newer) as payload:
        mine.adopt(newer, payload)
    assert cli.main(["--store", mine.root, "hub", "publish", str(tmp_path / "site" / "hub")]) == 0
    out = capsys.readouterr().out
    assert "pushed 'cnn'" in out and "already on the hub" in out and "'net'" in out
    assert sorted(hub_at(https_site.url).names()) == ["cnn", "mlp", "net"]


def test_every_write_is_refused_in_one_line(https_site, tmp_path, monkeypatch, capsys):
    _published(tmp_path, monkeypatch, capsys)
    hub = hub_at(https_site.url, secret=b"team-secret")
    store, other = local_bundle(tmp_path, name="mine")
    with pytest.raises(HubRefused) as refused:
        hub.push(other, store.payload_path(other))
    assert refused.value.action == "write" and refused.value.denied
    assert "an https hub is read-only" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(HubRefused, match="read-only"):
        hub.lease("net", "f" * 12, "bob@b").acquire()
    with pytest.raises(HubRefused, match="read-only"):
        hub.gc(keep=1)
    assert sorted(hub.names()) == ["mlp", "net"]


def test_a_certificate_a_server_down_and_a_folder_without_listing_are_each_one_line(
    https_site, tmp_path, monkeypatch, capsys
):
    _published(tmp_path, monkeypatch, capsys)
    monkeypatch.setenv("SSL_CERT_FILE", os.devnull)  # the system's CAs: they did not sign the test CA's certificate
    with pytest.raises(HubError, match="the server's certificate is not trusted .* SSL_CERT_FILE names"):
        hub_at(https_site.url).names()
    monkeypatch.setenv("SSL_CERT_FILE", https_site.ca)
    with pytest.raises(HubError, match=f"no {INDEX} there .is this the URL of a folder `hub publish` wrote"):
        hub_at(https_site.url.rsplit("/", 1)[0] + "/elsewhere").names()
    (tmp_path / "site" / "hub" / INDEX).write_text("<html>not found</html>")
    with pytest.raises(HubError, match=f"its {INDEX} is not a listing of ours"):
        hub_at(https_site.url).names()
    https_site.proxy.cut()
    with pytest.raises(HubError, match="the server refused the connection"):
        hub_at(https_site.url).names()
    for url, words in (("https://u:s3cr3t@host/x", "no password"), ("https:///x", "https://host/path")):
        with pytest.raises(ValueError, match=words) as refused:
            check_url(url)
        assert "s3cr3t" not in str(refused.value)


def test_a_damaged_chunk_and_another_secret_store_nothing(https_site, tmp_path, monkeypatch, capsys):
    _published(tmp_path, monkeypatch, capsys, names=("net",))
    receiving = LocalStore(str(tmp_path / "receiving"))
    [listed] = hub_at(https_site.url).versions("net")
    with pytest.raises(SignatureError):
        HubSource(hub_at(https_site.url, secret=b"another-team")).fetch(listed, receiving)
    chunk = next(p for p in (tmp_path / "site" / "hub").rglob("*") if p.is_file() and p.parent.name == listed.version)
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(HubError):
        HubSource(hub_at(https_site.url, secret=b"team-secret")).fetch(listed, receiving)
    assert receiving.versions("net") == []
    assert json.loads((tmp_path / "site" / "hub" / INDEX).read_text())["format"] == 1
