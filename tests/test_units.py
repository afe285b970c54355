"""units.py: sizes and ages users type, property-based: any text is either taken with the meaning it says or
refused with a ValueError that names the rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_compile_cache.units import count, parse_age, parse_size

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


def test_parse_size():
    assert parse_size("500M") == 500 << 20
    assert parse_size("2G") == 2 << 30
    assert parse_size("1.5GiB") == int(1.5 * (1 << 30))
    assert parse_size("1000") == 1000
    with pytest.raises(ValueError):
        parse_size("lots")


@pytest.mark.parametrize(
    ("n", "noun", "said"),
    [
        (1, "cache hit", "1 cache hit"),
        (0, "cache hit", "0 cache hits"),
        (1, "miss", "1 miss"),
        (3, "miss", "3 misses"),
        (1, "version", "1 version"),
        (2, "entry", "2 entries"),
        (2, "key", "2 keys"),
        (1, "stale precompile entry", "1 stale precompile entry"),
    ],
)
def test_count_says_a_number_with_its_noun_in_the_right_number(n, noun, said):
    assert count(n, noun) == said
