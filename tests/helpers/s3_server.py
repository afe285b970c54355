"""A real S3 protocol server for tests: moto's standalone server (`moto[server]`) on a free loopback port, reached
through a TCP proxy that can cut the network. The client side is configured the AWS way, through environment
variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ...), as a user's would be."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid

from .redis_server import free_port
from .tcp_proxy import HoldingProxy

REGION = "us-east-1"


# moto's server, its object writes one at a time: S3 checks a conditional write's condition (If-None-Match, If-Match)
# and writes in one step, moto checks and then writes, so two racing creates of one lease both won under load.
_ATOMIC_PUTS = """
import sys, threading
from moto.s3.responses import S3Response
from moto.server import main
lock, put = threading.Lock(), S3Response.put_object
def put_object(self, *args, **kwargs):
    with lock:
        return put(self, *args, **kwargs)
S3Response.put_object = put_object
main(sys.argv[1:])
"""


class S3Server:
    """moto's server in its own process. With `auth`, it checks signatures and IAM policies after the first
    `free_requests` requests (moto's INITIAL_NO_AUTH_ACTION_COUNT), which the fixture spends creating users."""

    def __init__(self, workdir, auth: bool = False, free_requests: int = 0) -> None:
        self.workdir = workdir
        self.auth, self.free_requests = auth, free_requests
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.start()
        self.proxy = HoldingProxy(self.port)

    @property
    def endpoint(self) -> str:
        """What clients use: the proxy in front of the server."""
        return f"http://127.0.0.1:{self.proxy.port}"

    def start(self) -> None:
        env = dict(os.environ)
        if self.auth:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(self.free_requests)
        log = open(os.path.join(str(self.workdir), f"moto-{self.port}.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ATOMIC_PUTS, "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/moto-api/data.json", timeout=1).read()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"moto's server exited with {self.proc.returncode}") from None
                time.sleep(0.1)
        raise RuntimeError("moto's server did not answer within 30 s")

    def kill(self) -> None:
        """The server process dies (what it held is gone with it: moto keeps objects in memory)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        self.proxy.cut()
        self.kill()

    def client(self, key: str = "test", secret: str = "test"):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            region_name=REGION,
        )

    def new_bucket(self) -> str:
        bucket = f"hub-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket

    def environ(self, key: str = "test", secret: str = "test") -> dict[str, str]:
        """What a user sets to reach this server: the AWS variables, nothing in the hub URL."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }


def use(environ: dict[str, str]) -> dict[str, str | None]:
    """Set ENVIRON in this process (and so in its children); returns what to put back with `put_back`."""
    before = {name: os.environ.get(name) for name in environ}
    os.environ.update(environ)
    return before


def put_back(before: dict[str, str | None]) -> None:
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


class S3Team:
    """An S3 server that checks credentials, a bucket `team-hub`, and IAM users `writer` and `reader` with their
    access keys (`keys[user]`), made in the requests the server lets pass before it checks."""

    BUCKET = "team-hub"
    POLICIES = {"writer": ["s3:*"], "reader": ["s3:GetObject", "s3:ListBucket"]}

    def __init__(self, workdir) -> None:
        import json

        import boto3

        self.server = S3Server(workdir, auth=True, free_requests=1 + 3 * len(self.POLICIES))
        self.server.client().create_bucket(Bucket=self.BUCKET)
        iam = boto3.client(
            "iam", endpoint_url=self.server.endpoint, aws_access_key_id="test", aws_secret_access_key="test",
            region_name=REGION,
        )  # fmt: skip
        self.keys: dict[str, tuple[str, str]] = {}
        resources = [f"arn:aws:s3:::{self.BUCKET}", f"arn:aws:s3:::{self.BUCKET}/*"]
        for user, actions in self.POLICIES.items():
            iam.create_user(UserName=user)
            key = iam.create_access_key(UserName=user)["AccessKey"]
            self.keys[user] = (key["AccessKeyId"], key["SecretAccessKey"])
            statement = {"Effect": "Allow", "Action": actions, "Resource": resources}
            document = json.dumps({"Version": "2012-10-17", "Statement": [statement]})
            iam.put_user_policy(UserName=user, PolicyName=f"{user}-hub", PolicyDocument=document)
        self._before: dict[str, str | None] = {}

    @property
    def url(self) -> str:
        return f"s3://{self.BUCKET}/hub"

    def environ(self, user: str, secret: str | None = None) -> dict[str, str]:
        key, real_secret = self.keys[user]
        return self.server.environ(key, secret or real_secret)

    def be(self, user: str, secret: str | None = None) -> None:
        """This process uses USER's credentials from now on (a backend opened after this reads them)."""
        before = use(self.environ(user, secret))
        for name, value in before.items():
            self._before.setdefault(name, value)

    def stop(self) -> None:
        put_back(self._before)
        self.server.stop()
