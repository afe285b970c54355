"""The warm kernel's protocol over real sockets: a request with its three streams, the answer line, and the kernel's
last line read apart from it."""

from __future__ import annotations

import importlib.util
import json
import os
import socket

import pytest

from jupyter_compile_cache.failure import Failure
from jupyter_compile_cache.kernels import protocol
from jupyter_compile_cache.kernels.kernel_start import Cold, KernelStart, Next
from jupyter_compile_cache.kernels.protocol import Ending, KernelRequest


def test_a_request_arrives_with_its_streams_and_the_answer_and_ending_read_apart():
    launcher, template = socket.socketpair()
    r, w = os.pipe()
    request = KernelRequest.here(["-f", "kernel-1.json"], started=1.5)
    request.env = {**request.env, "BIG": "x" * 100_000}  # longer than the first message
    protocol.send_request(launcher, request, [r, w, w])
    received, fds = protocol.receive_request(template)
    assert received == request and len(fds) == 3
    os.write(fds[1], b"through the handed-over stdout")  # the launcher's own pipe, as the kernel's stream
    assert os.read(r, 100) == b"through the handed-over stdout"
    for fd in (*fds, r, w):
        os.close(fd)

    protocol.answer(template, {"pid": 4242})
    template.sendall(protocol.exit_line(3))  # right behind the answer: the answer's reader leaves it
    assert protocol.read_answer(launcher) == {"pid": 4242}
    assert protocol.read_ending(launcher) == Ending(code=3)
    launcher.close()
    template.close()


@pytest.mark.parametrize(
    "sent, ending",
    [
        (protocol.exit_line(0), Ending(code=0)),
        (protocol.exit_line(-1), Ending(code=-1)),  # `sys.exit(-1)`: an exit code still, not a signal
        (protocol.signal_line(9), Ending(signal=9)),
        (b"", Ending()),  # closed without a word: killed, and its parent could not tell
        (b"exit soon\n", Ending()),
    ],
)
def test_the_kernel_s_last_line(sent, ending):
    launcher, kernel = socket.socketpair()
    kernel.sendall(sent)
    kernel.close()
    assert protocol.read_ending(launcher) == ending
    launcher.close()


def test_what_is_not_a_request_or_an_answer_is_refused():
    launcher, template = socket.socketpair()
    launcher.sendall(b"\x00\x00\x00\x05hello")  # framed, but no streams and no request
    assert protocol.receive_request(template) is None
    template.sendall(b"[1, 2]\n")
    with pytest.raises(ValueError):
        protocol.read_answer(launcher)
    template.sendall(b"x" * (protocol.ANSWER_LIMIT + 10))  # a peer that never ends its line
    with pytest.raises(ValueError):
        protocol.read_answer(launcher)
    template.close()
    with pytest.raises(ConnectionError):
        protocol.read_answer(launcher)
    launcher.close()


def test_the_module_paths_are_modules_and_the_folder_s_names_are_told_apart(tmp_path):
    for module in (protocol.LAUNCHER_MODULE, protocol.TEMPLATE_MODULE, protocol.KERNEL_PROCESS_MODULE):
        assert importlib.util.find_spec(module) is not None, module
    name = protocol.template_name("key", 7)
    info, sock = protocol.info_path(str(tmp_path), name), protocol.socket_path(str(tmp_path), name)
    assert protocol.is_info_file(os.path.basename(info)) and not protocol.is_info_file(os.path.basename(sock))
    per_key = {protocol.warming_path(str(tmp_path), "key"), protocol.failure_path(str(tmp_path), "key")}
    per_key.add(protocol.retired_path(str(tmp_path), "key"))
    assert len(per_key) == 3 and not any(protocol.is_info_file(os.path.basename(p)) for p in per_key)


def test_a_template_problem_crosses_as_json_and_what_is_not_one_reads_as_none():
    for trouble in protocol.TemplateTrouble:
        problem = protocol.TemplateProblem(trouble, "detail")
        assert protocol.TemplateProblem.from_json(json.loads(json.dumps(problem.to_json()))) == problem
    for junk in (None, "idle", {"trouble": "a newer trouble"}, {"detail": "x"}, [1]):
        assert protocol.TemplateProblem.from_json(junk) is None


def test_why_a_warm_up_failed_is_read_back_until_it_is_old_enough_to_retry(tmp_path):
    folder = str(tmp_path)
    assert protocol.read_failure(folder, "key", retry_after=60) is None
    protocol.write_failure(folder, "key", Failure.of(ImportError("no module named 'torch'")))
    assert protocol.read_failure(folder, "key", retry_after=60) == Failure("ImportError", "no module named 'torch'")
    start = KernelStart("cold", cold=Cold.NONE_YET, next=Next.FAILED, next_failure=Failure("ImportError", "no torch"))
    assert KernelStart.from_json(json.loads(json.dumps(start.to_json()))) == start
    with open(protocol.failure_path(folder, "key"), "w") as f:
        f.write("RuntimeError: older")
    assert protocol.read_failure(folder, "key", retry_after=60) == Failure("", "RuntimeError: older")
    assert protocol.read_failure(folder, "key", retry_after=0) is None  # old enough: retried, and forgotten
    assert not os.path.exists(protocol.failure_path(folder, "key"))
