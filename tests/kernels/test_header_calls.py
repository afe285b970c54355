"""kernels/header_calls.py: the header checks kept in the runtime folder, one file per installation; kept once each,
capped, read as empty when damaged; a template's replayer makes each call once, and again only when the file
changed."""

from __future__ import annotations

import os

import pytest

from jupyter_compile_cache.kernels import header_calls, protocol
from jupyter_compile_cache.kernels.template_fit import install_stamp
from jupyter_compile_cache.torch_adapter.cpp_headers import HeaderCall


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    folder = tmp_path / "runtime"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_RUNTIME_DIR", str(folder))
    return folder


def _call(n: int) -> HeaderCall:
    return HeaderCall(f"call {n}".encode(), "a-config")  # never made: no torch call unpickles from these


def test_calls_are_kept_once_each_in_this_installations_file(runtime):
    header_calls.keep([_call(1), _call(2)])
    header_calls.keep([_call(2), _call(3)])
    path = protocol.header_calls_path(str(runtime), install_stamp())
    assert header_calls.read(path) == [_call(1), _call(2), _call(3)]
    assert not [n for n in os.listdir(runtime) if n.endswith(".tmp")]
    assert not protocol.is_info_file(os.path.basename(path))  # never taken for a template's info by a launcher


def test_the_file_keeps_its_newest_calls_only(runtime):
    header_calls.keep([_call(n) for n in range(header_calls.MOST_CALLS + 5)])
    kept = header_calls.read(protocol.header_calls_path(str(runtime), install_stamp()))
    assert kept == [_call(n) for n in range(5, header_calls.MOST_CALLS + 5)]


@pytest.mark.parametrize("text", ["", "{not json", '[{"arguments": "%%%"}]', '{"a": 1}', "[1, 2]"])
def test_a_damaged_file_reads_as_empty_and_is_written_anew(runtime, text):
    path = protocol.header_calls_path(str(runtime), install_stamp())
    with open(path, "w") as f:
        f.write(text)
    assert header_calls.read(path) == []
    header_calls.keep([_call(1)])
    assert header_calls.read(path) == [_call(1)]


def test_the_replayer_takes_each_call_once_and_looks_again_only_when_the_file_changed(runtime):
    replayer = header_calls.Replayer(install_stamp())
    assert not replayer.changed() and replayer.replay_new() == 0  # no file yet
    header_calls.keep([_call(1)])
    assert replayer.changed()
    assert replayer.replay_new() == 0  # made under another config than this process's: read, not made
    assert replayer.made == [_call(1)] and not replayer.changed()
    header_calls.keep([_call(1)])  # nothing new: the file is left as it was
    assert not replayer.changed()
    header_calls.keep([_call(2)])
    assert replayer.changed()
    replayer.replay_new()
    assert replayer.made == [_call(1), _call(2)]
