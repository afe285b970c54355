"""options.py: what a script's CellOptions, RemoveOptions and GcOptions take, checked by the magic's rules: a bad
value is a ValueError naming the option."""

from __future__ import annotations

import socket

import pytest

from jupyter_compile_cache.core.options import CellOptions, bundle_name, hub_url, namespace, writer


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ttl": 0}, "ttl: must be a whole number of seconds, 1 or more, not 0"),
        ({"ttl": True}, "ttl: must be a whole number of seconds"),
        ({"wait": -1}, "wait: must be a number of seconds, 0 or more, not -1"),
        ({"wait": float("nan")}, "wait: must be a number of seconds"),
        ({"version": " "}, "version: an id as `list` shows it"),
        ({"namespace": "a b"}, "namespace: "),
        ({"hub": "ftp://host/x"}, "hub: "),
    ],
)
def test_a_bad_cell_option_is_a_value_error_that_names_it(options, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace("`", "`")):
        CellOptions(**options)


def test_good_options_and_the_checks_the_front_ends_share():
    assert CellOptions(ttl=60, wait=2.5, version="ab12", namespace="team", hub="redis://h:6379/0").ttl == 60
    assert bundle_name("net-v1.2_x") == "net-v1.2_x"
    assert hub_url("file:///shared/folder") == "file:///shared/folder"
    assert namespace("team") == "team"
    for bad, check in (("a/b", bundle_name), ("gopher://h", hub_url), ("", namespace)):
        with pytest.raises(ValueError):
            check(bad)
    assert writer().endswith("@" + socket.gethostname())
