from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from helpers import hubs, kernels  # noqa: E402
from helpers.kernels import Kernel  # noqa: E402
from helpers.redis_server import RedisClusterServers, RedisServer, TlsRedisServer  # noqa: E402
from helpers.redis_server import free_port as _free_port  # noqa: E402

# g++'s builds are kept for the test run (helpers/cxx_cache/g++ says how), unless JCC_TEST_CXX_CACHE=0: every
# kernel and processes it starts find that g++ first on PATH.
_CXX_CACHE = None  # made by this run (a pytest started inside a test shares its parent's)
if os.environ.get("JCC_TEST_CXX_CACHE") != "0" and "JCC_TEST_CXX_PATH" not in os.environ:
    _CXX_CACHE = tempfile.mkdtemp(prefix="jcc-test-cxx-")
    os.environ.update(
        JCC_TEST_CXX_CACHE=_CXX_CACHE,
        JCC_TEST_CXX_PATH=os.environ.get("PATH", os.defpath),
        PATH=os.path.join(os.path.dirname(__file__), "helpers", "cxx_cache") + os.pathsep + os.environ.get("PATH", ""),
    )


# pytest-xdist's workers export COLUMNS=80 and LINES=24: the kernels and commands the tests start see no terminal, as
# under a plain pytest.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)


def _template_workers(config: pytest.Config) -> list[str]:
    """The pytest workers whose kernels are forked (JCC_TEST_KERNELS=warm), as PYTEST_XDIST_WORKER names them."""
    if not kernels.WARM_KERNELS or hasattr(config, "workerinput"):  # (a worker: its controller made them)
        return []
    count = getattr(config.option, "numprocesses", None)
    return [f"gw{i}" for i in range(count)] if isinstance(count, int) and count > 0 else ["main"]


def pytest_configure(config: pytest.Config) -> None:
    workers = _template_workers(config)
    if workers:
        if "JCC_TEST_KERNELS_LOG" not in os.environ:  # the workers, started after this, inherit it
            os.environ["JCC_TEST_KERNELS_LOG"] = os.path.join(tempfile.mkdtemp(prefix="jcc-test-starts-"), "log")
        kernels.start_templates(workers)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if _template_workers(config):
        terminalreporter.write_line(kernels.start_summary(os.environ["JCC_TEST_KERNELS_LOG"]))


def pytest_unconfigure(config: pytest.Config) -> None:
    kernels.end_worker_templates(_template_workers(config))


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _CXX_CACHE is not None:
        shutil.rmtree(_CXX_CACHE, ignore_errors=True)


@pytest.fixture
def dirs(tmp_path):
    """A private store and cache dirs for one test, so tests never share torch or store state."""
    paths = {name: tmp_path / name for name in ("store", "cache_a", "cache_b", "cache_c")}
    for path in paths.values():
        path.mkdir()
    return paths


@pytest.fixture
def kernel_factory(request):
    started: list[Kernel] = []
    plain = request.node.get_closest_marker("plain_kernels") is not None  # the test's subject is the plain kernel

    def start(unset: tuple[str, ...] = (), **env: str) -> Kernel:
        kernel = Kernel({k: str(v) for k, v in env.items()}, plain=plain, unset=unset)
        started.append(kernel)
        return kernel

    yield start
    for kernel in started:
        kernel.shutdown()


def _running(tmp_path, name, start):
    """A real server (or cluster) in its own directory under tmp_path, stopped after the test."""
    workdir = tmp_path / name
    workdir.mkdir()
    server = start(workdir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_server(tmp_path):
    yield from _running(tmp_path, "redis", RedisServer)


@pytest.fixture
def redis_cluster(tmp_path):
    """Three redis-server masters joined into a Redis Cluster on loopback."""
    yield from _running(tmp_path, "cluster", RedisClusterServers)


@pytest.fixture
def tls_redis(tmp_path):
    """A TLS-only redis-server with a CA and certificates made by openssl."""
    yield from _running(tmp_path, "tls", TlsRedisServer)


@pytest.fixture(params=hubs.KINDS)
def any_hub(request, tmp_path):
    """The same test on every hub backend: a redis-server, a Redis Cluster, Redis over TLS, S3, Azure Blob (Azurite)
    and a shared folder."""
    yield from _hub(request.param, tmp_path)


@pytest.fixture(params=[kind for kind in hubs.KINDS if kind != "rediss"])
def clocked_hub(request, tmp_path):
    """For tests that wait on the clock (TTLs, renewals, racing processes): every backend but Redis over TLS, whose
    expiry and scripts are the plain redis-server's (every other test runs on it too)."""
    yield from _hub(request.param, tmp_path)


def _hub(kind, tmp_path):
    workdir = tmp_path / f"hub-{kind}"
    workdir.mkdir()
    hub = hubs.start(kind, workdir)
    try:
        yield hub
    finally:
        hub.stop()


@pytest.fixture
def s3_server(tmp_path):
    """moto's S3 server of this test alone (it may be killed), its AWS variables set in this process."""
    from helpers import s3_server as s3

    workdir = tmp_path / "s3"
    workdir.mkdir()
    server = s3.S3Server(workdir)
    before = s3.use(server.environ())
    try:
        yield server
    finally:
        s3.put_back(before)
        server.stop()


def _emulator_of_this_test(workdir, make):
    """MAKE(WORKDIR) started in a folder of its own, stopped after the test; no variable is set."""
    workdir.mkdir()
    server = make(workdir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def azurite(tmp_path):
    """Azurite, the Azure Blob Storage emulator, of this test alone (it may be stopped)."""
    from helpers.azurite import AzuriteServer

    yield from _emulator_of_this_test(tmp_path / "azurite", AzuriteServer)


@pytest.fixture
def gcs_server(tmp_path):
    """fake-gcs-server, a Google Cloud Storage emulator, of this test alone."""
    from helpers.gcs_server import GcsServer

    yield from _emulator_of_this_test(tmp_path / "gcs", GcsServer)


@pytest.fixture
def https_site(tmp_path, monkeypatch):
    """A static https server of this test alone serving tmp_path/site (its hub URL: the folder `site/hub`), its CA
    trusted through SSL_CERT_FILE in this process."""
    from helpers.https_server import HttpsServer

    (tmp_path / "site").mkdir()
    (tmp_path / "https").mkdir()
    server = HttpsServer(tmp_path / "https", tmp_path / "site")
    monkeypatch.setenv("SSL_CERT_FILE", server.ca)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_team(tmp_path):
    """moto's S3 server checking signatures and IAM policies, with a bucket and two users made the AWS way: a
    writer (every S3 action on the bucket) and a reader (GetObject and ListBucket only)."""
    from helpers.s3_server import S3Team

    workdir = tmp_path / "s3-team"
    workdir.mkdir()
    team = S3Team(workdir)
    try:
        yield team
    finally:
        team.stop()


@pytest.fixture
def free_port():
    return _free_port()


@pytest.fixture
def acl_hub(redis_server):
    """A redis-server with team users made by the documented ACL lines (helpers/redis_server.py `AclUsers`)."""
    from helpers.redis_server import AclUsers

    return AclUsers(redis_server)
