"""Requests to object stores: one deadline for every request, and failures in one line.

``TB_MONITOR_REMOTE_TIMEOUT_S`` (10 s) is how long one request may take to connect, and again to
answer, with two attempts (``options``: the client settings fsspec's filesystems are made with;
``bound_boto3_requests``: the same for TensorBoard's own S3 reader). An operation of one request
(an object, a probe) fails after three times that whatever the client library retries
(``call``). ``reading`` turns a store's failure into ``StoreError`` naming the URL, the endpoint
and the cause (``cause``), so a command exits with one line, not a traceback.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from tb_monitor import _env

__all__ = [
    "ATTEMPTS",
    "LogdirError",
    "StoreError",
    "bound_boto3_requests",
    "call",
    "cause",
    "deadline_s",
    "endpoint_of",
    "options",
    "reading",
    "s3_endpoint",
]


class LogdirError(ValueError):
    """A logdir that cannot be used: the message names it and says what to do."""


class StoreError(OSError):
    """An object store that could not be read: the message names the URL, the endpoint and why
    (credentials refused, no answer within the deadline, cannot connect)."""


#: Attempts of one request (the first and one retry): a dead store fails in bounded time.
ATTEMPTS = 2


def options(scheme: str) -> dict[str, Any]:
    """Storage options beyond fsspec's own configuration: TensorBoard's S3 settings, timeouts."""
    chosen: dict[str, Any] = {"skip_instance_cache": True}
    timeout = _env.remote_timeout_s()
    if scheme in ("s3", "s3a"):
        endpoint, _ = s3_endpoint()
        if endpoint:
            chosen["endpoint_url"] = endpoint
        chosen["config_kwargs"] = botocore_config(timeout)
    elif scheme in ("gs", "gcs"):
        chosen["requests_timeout"] = timeout
    return chosen


def s3_endpoint() -> tuple[str, str] | tuple[None, None]:
    """The S3 endpoint the environment names and the variable naming it: AWS's variables, else
    TensorBoard's S3_ENDPOINT."""
    for variable in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "S3_ENDPOINT"):
        endpoint = os.environ.get(variable)
        if endpoint:
            if "://" not in endpoint:
                https = _env.flag("S3_USE_HTTPS", True)
                endpoint = f"{'https' if https else 'http'}://{endpoint}"
            return endpoint, variable
    return None, None


def botocore_config(timeout: float) -> dict[str, Any]:
    """botocore's ``Config`` arguments for the deadline: connect and read timeouts, two attempts."""
    return {
        "connect_timeout": timeout,
        "read_timeout": timeout,
        "retries": {"total_max_attempts": ATTEMPTS, "mode": "standard"},
    }


def bound_boto3_requests() -> None:
    """Give boto3's default session (TensorBoard's S3 reader makes its clients there) the
    deadline of our own requests; a tensorboard process reading ``s3://`` calls it once."""
    import boto3
    from botocore.config import Config

    if boto3.DEFAULT_SESSION is None:
        boto3.setup_default_session()
    config = Config(**botocore_config(_env.remote_timeout_s()))
    boto3.DEFAULT_SESSION._session.set_default_client_config(config)  # its botocore session


def endpoint_of(url: str) -> str:
    """The endpoint a URL's requests go to and the setting that chose it, for messages."""
    scheme = url.partition("://")[0].lower()
    if scheme in ("s3", "s3a"):
        endpoint, variable = s3_endpoint()
        return f"{endpoint} ({variable})" if endpoint else "AWS's (no AWS_ENDPOINT_URL set)"
    if scheme in ("gs", "gcs"):
        emulator = os.environ.get("STORAGE_EMULATOR_HOST")
        return f"{emulator} (STORAGE_EMULATOR_HOST)" if emulator else "Google's"
    return f"{scheme}://"


def deadline_s() -> float:
    """How long one operation (a listing, an object) may take, all its attempts included."""
    return (ATTEMPTS + 1) * _env.remote_timeout_s()


def cause(url: str, exc: BaseException) -> str:
    """Why a request for ``url`` failed, in one line naming the endpoint."""
    where = endpoint_of(url)
    detail = " ".join(f"{type(exc).__name__}: {exc}".split())
    if isinstance(exc, PermissionError):
        return f"the store at {where} refused these credentials ({detail})"
    if type(exc).__name__ == "FSTimeoutError":  # fsspec's deadline of the whole operation
        return f"the store at {where} did not answer within {deadline_s():g} s"
    if isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__:  # botocore's, aiohttp's
        timeout = _env.remote_timeout_s()
        return f"the store at {where} did not answer within {timeout:g} s ({detail})"
    return f"cannot reach the store at {where} ({detail})"


@contextlib.contextmanager
def reading(url: str) -> Iterator[None]:
    """Failures of the store while reading ``url`` as ``StoreError``; a missing object stays
    ``FileNotFoundError``."""
    try:
        yield
    except (FileNotFoundError, LogdirError):
        raise
    except Exception as exc:
        raise StoreError(f"cannot read {url}: {cause(url, exc)}") from exc


def call(filesystem: Any, operation: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``operation(*args)`` of an fsspec filesystem, failing after the operation's deadline
    whatever its client retries (fsspec's own timeout; synchronous filesystems have none).

    For operations of one request (or one object of at most a segment's 16 MiB); listings,
    which page through as many requests as the logdir is long, rely on each request's timeouts.
    """
    if getattr(filesystem, "async_impl", False):
        kwargs["timeout"] = deadline_s()
    return operation(*args, **kwargs)
