"""The values settings.py reads from outside (sizes, hub URLs, namespaces, yes/no), property-based: any text is
either taken with the meaning it says or refused with a ValueError that names the rule and never a password."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_compile_cache.settings import (
    check_hub_url,
    check_namespace,
    parse_age,
    parse_bool,
    parse_size,
    redact,
)

UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
MANY = settings(max_examples=400, deadline=None)


@given(st.text(max_size=16) | st.from_regex(r"-?[0-9.e+]{0,6}[kKmMgGtT]?(i?[bB])?", fullmatch=True))
@MANY
def test_any_text_is_a_size_or_a_clear_error(text):
    try:
        value = parse_size(text)
    except ValueError as exc:
        assert str(exc).startswith("not a size:") and "500M" in str(exc)
        return
    assert isinstance(value, int) and value >= 0


@given(
    st.integers(0, 10_000), st.sampled_from(sorted(UNITS)), st.sampled_from(["", "b", "ib", "B", "iB"]), st.booleans()
)
@MANY
def test_a_size_means_what_it_says(number, unit, suffix, upper):
    if suffix.endswith("ib".lower()) and not unit:
        suffix = ""  # "ib" alone is no unit
    text = f"{number}{unit.upper() if upper else unit}{suffix}"
    assert parse_size(text) == number * UNITS[unit]


def test_sizes_users_write():
    assert parse_size("500M") == 500 << 20 and parse_size("1.5GiB") == 3 << 29 and parse_size(" 2g ") == 2 << 30
    for bad in ("", "-1", "lots", "1e3", "inf", "nan", "5 G", "1x"):
        with pytest.raises(ValueError, match="not a size"):
            parse_size(bad)


def test_ages_users_write():
    assert parse_age("30d") == 30 * 86400 and parse_age("12h") == 43200 and parse_age(" 90m ") == 5400
    assert parse_age("2w") == 14 * 86400 and parse_age("45s") == 45 and parse_age("3600") == 3600
    assert parse_age("1.5h") == 5400
    for bad in ("", "-1d", "lots", "inf", "30 days", "1e3", "d"):
        with pytest.raises(ValueError, match="not an age"):
            parse_age(bad)


_URLS = st.builds(
    lambda scheme, auth, host, port, db: f"{scheme}://{auth}{host}{port}{db}",
    st.sampled_from(["redis", "rediss", "unix", "http", "redis+x", ""]),
    st.sampled_from(["", "alice:s3cr3t-pw@", ":s3cr3t-pw@", "user@"]),
    st.sampled_from(["127.0.0.1", "cache.example", "", "[::1]", "h st", "/tmp/redis.sock"]),
    st.sampled_from(["", ":6379", ":0", ":99999", ":port", ":-1"]),
    st.sampled_from(["", "/0", "/15", "/db", "/0?ssl_ca_certs=/ca.pem", "?db=2", "?db=x"]),
)


@given(_URLS | st.text(max_size=40))
@MANY
def test_any_hub_url_opens_in_redis_py_or_is_a_clear_error_without_the_password(url):
    import redis  # loaded, so check_hub_url applies redis-py's own rules too (as it does once the hub was used)

    try:
        checked = check_hub_url(url)
    except ValueError as exc:
        assert str(exc).startswith("not a Redis URL") and "s3cr3t-pw" not in str(exc)
        return
    redis.Redis.from_url(checked)  # what we take, redis-py opens (no connection is made here)
    assert "s3cr3t-pw" not in redact(checked)


@given(st.text(max_size=30), st.text(max_size=20), st.text(max_size=20))
@MANY
def test_redact_hides_any_password_even_in_text_that_is_no_url(scheme, user, host):
    url = f"{scheme}://{user.replace('@', '')}:s3cr3t-pw@{host.replace('/', '')}"
    assert "s3cr3t-pw" not in redact(url) and "s3cr3t-pw" not in redact(url.split("://", 1)[1])


@given(st.text(max_size=140) | st.sampled_from(["team/proj", "a//b", "/a", "a/", "{x}", "ok.name-1_2", "a b"]))
@MANY
def test_a_namespace_is_taken_only_as_slash_joined_safe_parts(namespace):
    try:
        checked = check_namespace(namespace)
    except ValueError as exc:
        assert "invalid namespace" in str(exc)
        return
    assert checked == namespace and len(namespace) <= 128
    assert not set(namespace) & set("{} \t\n:*?") and "//" not in namespace  # one hash slot, one key shape
    assert not namespace.startswith("/") and not namespace.endswith("/")


@given(st.text(max_size=8))
@MANY
def test_yes_or_no_is_one_of_the_words_or_a_clear_error(text):
    try:
        value = parse_bool(text)
    except ValueError as exc:
        assert "not a yes/no value" in str(exc)
        return
    assert value is (text.strip().lower() in ("1", "true", "yes", "on"))
