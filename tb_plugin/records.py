"""Timeline records' strings from TensorBoard's data provider, without a numpy array per record.

The provider's ``read_tensors`` turns every record into a numpy array (``make_ndarray``, a
large share of a cold load of a big job's records), and the
store only wants the strings back. With ``--load_fast=true`` the provider is a
:class:`~tensorboard.data.grpc_provider.GrpcDataProvider`: :func:`read_series` then asks its data
server the same ``ReadTensors`` question itself and takes each tensor's ``string_val`` as it
came, far cheaper. Any other provider, and any tensor that is not a plain string tensor, goes
through the public path, so both give the same strings (tested). On the public path one
record ``make_ndarray`` refuses fails the provider's whole read: the series are then read one
at a time, and a refused one from the tensors TensorBoard's loader keeps, so that record alone
is left out (named) and its chunk's other records are kept.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from tensorboard.compat.proto import types_pb2
from tensorboard.data import provider as tb_provider

from tb_monitor import contract

__all__ = [
    "MAX_STEPS",
    "Series",
    "grpc_attribute",
    "read_grpc",
    "read_series",
    "tensor_strings",
]

_log = logging.getLogger(__name__)

#: All of a series' records: TensorBoard samples nothing below this many steps.
MAX_STEPS = 2**31 - 1

#: The most elements a timeline tensor that does not list its strings may declare (one that
#: does is read whatever its size): ``make_ndarray`` would expand a repeated-value shorthand
#: of 2**40 in memory. Ours list theirs; none of ours holds a million.
_MAX_ELEMENTS = 1 << 20


class Series(NamedTuple):
    """One (run, tag)'s records, in the provider's order: each record's step, and what
    :func:`tb_monitor.contract.decode_records` takes: its strings, its wall time, and whether
    its tensor has a dimension (content versions 2 to 4)."""

    steps: list[int]
    records: list[tuple[Sequence[str | bytes], float, bool]]


def read_series(
    data_provider: tb_provider.DataProvider,
    ctx: Any,
    experiment_id: str,
    plugin_name: str,
    runs: list[str],
    tags: list[str],
) -> dict[str, dict[str, Series]]:
    """Every record of ``runs`` x ``tags`` under ``plugin_name``: ``{run: {tag: Series}}``."""
    stub = grpc_attribute(data_provider, "_stub")
    if stub is not None:
        return read_grpc(stub, experiment_id, plugin_name, runs, tags)

    def read(runs: list[str], tags: list[str]) -> dict[str, dict[str, Series]]:
        data = data_provider.read_tensors(
            ctx,
            experiment_id=experiment_id,
            plugin_name=plugin_name,
            downsample=MAX_STEPS,
            run_tag_filter=tb_provider.RunTagFilter(runs=runs, tags=tags),
        )
        return {
            run: {tag: _datum_series(s) for tag, s in by_tag.items()}
            for run, by_tag in data.items()
        }

    try:
        return read(runs, tags)
    except _REFUSED:  # one record TensorBoard cannot make an array of fails the whole read
        return _read_each(data_provider, read, runs, tags)


#: What ``make_ndarray`` raises on a tensor it refuses (a shape its strings do not fill, an
#: unknown dtype, a repeated-value shorthand too big to make).
_REFUSED = (ValueError, TypeError, MemoryError)


def _datum_series(data: list[tb_provider.TensorDatum]) -> Series:
    return Series(
        [datum.step for datum in data],
        [_array_strings(datum.numpy, float(datum.wall_time)) for datum in data],
    )


def _read_each(
    data_provider: tb_provider.DataProvider,
    read: Callable[[list[str], list[str]], dict[str, dict[str, Series]]],
    runs: list[str],
    tags: list[str],
) -> dict[str, dict[str, Series]]:
    """``read_series`` one series at a time, after a read of them all was refused: a series
    TensorBoard refuses is read from the tensors its loader keeps (``tensor_strings`` names
    the record it cannot read, and decoding leaves that one out), or, where the provider keeps
    none we can reach, left out with a warning."""
    out: dict[str, dict[str, Series]] = {}
    for run in runs:
        for tag in tags:
            try:
                found = read([run], [tag]).get(run, {}).get(tag)
            except _REFUSED as exc:
                found = _kept_series(data_provider, run, tag)
                if found is None:
                    _log.warning(
                        "run %r, tag %r: not read (%s: %s)", run, tag, type(exc).__name__, exc
                    )
            if found is not None:
                out.setdefault(run, {})[tag] = found
    return out


def _kept_series(data_provider: Any, run: str, tag: str) -> Series | None:
    """The series' records as TensorBoard's loader keeps them (its ``TensorEvent``s, before
    ``read_tensors`` makes arrays of them), or None where the provider is not TensorBoard's
    own (``MultiplexerDataProvider``) or keeps no such series."""
    multiplexer = getattr(data_provider, "_multiplexer", None)
    if multiplexer is None:
        return None
    try:
        events = multiplexer.Tensors(run, tag)
    except KeyError:
        return None
    return Series(
        [event.step for event in events],
        [tensor_strings(event.tensor_proto, float(event.wall_time)) for event in events],
    )


def grpc_attribute(data_provider: Any, name: str) -> Any:
    """The private attribute ``name`` (``_stub``, ``_addr``) of ``data_provider`` when it is
    TensorBoard's gRPC provider, else None (another provider, or a TensorBoard without gRPC:
    the public path)."""
    try:
        from tensorboard.data import grpc_provider
    except ImportError:
        return None
    if not isinstance(data_provider, grpc_provider.GrpcDataProvider):
        return None
    return getattr(data_provider, name, None)


def read_grpc(
    stub: Any, experiment_id: str, plugin_name: str, runs: list[str], tags: list[str]
) -> dict[str, dict[str, Series]]:
    """``read_series`` of a data server, asked through its gRPC ``stub``."""
    from tensorboard.data.proto import data_provider_pb2

    request = data_provider_pb2.ReadTensorsRequest(experiment_id=experiment_id)
    request.plugin_filter.plugin_name = plugin_name
    request.run_tag_filter.runs.names.extend(sorted(runs))
    request.run_tag_filter.tags.names.extend(sorted(tags))
    request.downsample.num_points = MAX_STEPS
    response = stub.ReadTensors(request)
    out: dict[str, dict[str, Series]] = {}
    for run_entry in response.runs:
        by_tag = out[run_entry.run_name] = {}
        for tag_entry in run_entry.tags:
            data = tag_entry.data
            by_tag[tag_entry.tag_name] = Series(
                list(data.step),
                [
                    tensor_strings(value, wall_time)
                    for wall_time, value in zip(data.wall_time, data.value, strict=True)
                ],
            )
    return out


def tensor_strings(value: Any, wall_time: float) -> tuple[Sequence[str | bytes], float, bool]:
    """A ``TensorProto``'s strings as ``make_ndarray`` would flatten them, read straight off a
    string tensor of scalar or vector shape that lists every element; anything else (another
    dtype, packed content, a repeated-value shorthand) through ``make_ndarray`` itself, and
    a tensor it refuses as ``contract.Unreadable``: decoding leaves that record out, named."""
    strings = value.string_val
    dims = value.tensor_shape.dim
    if value.dtype == types_pb2.DT_STRING and not value.tensor_content:
        if not dims and len(strings) == 1:
            return strings, wall_time, False
        if len(dims) == 1 and dims[0].size == len(strings):
            return strings, wall_time, True
    # Imported here: tensorboard's tensor_util pulls in its TensorFlow stub (and boto3 with
    # it), which a helper process would pay at its start, for the rare record that needs it.
    from tensorboard.util import tensor_util

    try:
        elements = math.prod(dim.size for dim in dims)
        if elements > _MAX_ELEMENTS:
            raise ValueError(f"it declares {elements} elements, more than a record holds")
        array = tensor_util.make_ndarray(value)
    except (TypeError, ValueError, MemoryError) as exc:  # refused: this record alone
        why = f"its tensor cannot be read ({type(exc).__name__}: {exc})"
        return contract.Unreadable(why), wall_time, False
    return _array_strings(array, wall_time)


def _array_strings(array: Any, wall_time: float) -> tuple[Sequence[str | bytes], float, bool]:
    return array.reshape(-1).tolist(), wall_time, array.ndim > 0
