"""Hub URLs (storage/backends: the registry's `check_url`, url.py's `redact`), property-based: any text is either
taken or refused with a ValueError that names the rule and never a password."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_compile_cache.storage.backends import check_url, redact
from jupyter_compile_cache.storage.backends.folder import folder_of

MANY = settings(max_examples=400, deadline=None)


_URLS = st.builds(
    lambda scheme, auth, host, port, db: f"{scheme}://{auth}{host}{port}{db}",
    st.sampled_from(["redis", "rediss", "unix", "http", "redis+x", "redis+cluster", "file", "s3", "gs", "az", ""]),
    st.sampled_from(["", "alice:s3cr3t-pw@", ":s3cr3t-pw@", "user@"]),
    st.sampled_from(["127.0.0.1", "cache.example", "", "[::1]", "h st", "/tmp/redis.sock"]),
    st.sampled_from(["", ":6379", ":0", ":99999", ":port", ":-1"]),
    st.sampled_from(["", "/0", "/15", "/db", "/0?ssl_ca_certs=/ca.pem", "?db=2", "?db=x"]),
)


@given(_URLS | st.text(max_size=40))
@MANY
def test_any_hub_url_opens_in_its_client_or_is_a_clear_error_without_the_password(url):
    import redis  # loaded, so check_url applies redis-py's own rules too (as it does once the hub was used)

    try:
        checked = check_url(url)
    except ValueError as exc:
        assert str(exc).startswith("not a hub URL") and "s3cr3t-pw" not in str(exc)
        return
    if checked.startswith("file://"):  # a folder hub: an absolute path, no host
        assert os.path.isabs(folder_of(checked))
    elif checked.split("://")[0] in ("s3", "gs", "az"):  # a bucket name, nothing else before the path: no port
        bucket = urlsplit(checked).netloc
        assert bucket and not set(bucket) - set("abcdefghijklmnopqrstuvwxyz0123456789.-_")
    else:  # what we take, redis-py opens (no connection is made here)
        redis.Redis.from_url(checked.replace("redis+cluster://", "redis://"))
    assert "s3cr3t-pw" not in redact(checked)


@given(st.text(max_size=30), st.text(max_size=20), st.text(max_size=20))
@MANY
def test_redact_hides_any_password_even_in_text_that_is_no_url(scheme, user, host):
    url = f"{scheme}://{user.replace('@', '')}:s3cr3t-pw@{host.replace('/', '')}"
    assert "s3cr3t-pw" not in redact(url) and "s3cr3t-pw" not in redact(url.split("://", 1)[1])
