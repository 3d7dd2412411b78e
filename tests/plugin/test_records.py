"""Reading timeline records' strings: straight off the data server's tensors, as the public path."""

from __future__ import annotations

import numpy as np
import pytest
from plugin_helpers import data_server_provider, local_provider, small_job, wait_for
from tensorboard import context as tb_context
from tensorboard.compat.proto import tensor_pb2, types_pb2
from tensorboard.util import tensor_util

from tb_monitor import contract
from tb_plugin.records import read_series, tensor_strings
from tb_plugin.store import TimelineStore


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A small synthetic job with one restart (versions 3 batches and single records)."""
    return small_job(tmp_path_factory.mktemp("logs"))


@pytest.fixture(scope="module")
def grpc_provider(job):
    """TensorBoard's gRPC data provider over the job, served by its real Rust data server."""
    return data_server_provider(job.logdir)


def _everything(provider) -> dict:
    ctx = tb_context.RequestContext()
    listing = provider.list_tensors(ctx, experiment_id="", plugin_name=contract.PLUGIN_NAME)
    tags = sorted({tag for by_tag in listing.values() for tag in by_tag})
    series = read_series(provider, ctx, "", contract.PLUGIN_NAME, sorted(listing), tags)
    return {
        (run, tag): (
            s.steps,
            [(list(map(bytes, v)), wall, batched) for v, wall, batched in s.records],
        )
        for run, by_tag in series.items()
        for tag, s in by_tag.items()
    }


def test_the_data_servers_strings_are_the_public_paths(job, grpc_provider):
    """Through the data server, every record's strings, step, time and shape equal those that
    TensorBoard's in-process provider hands over as numpy arrays."""
    expected = _everything(local_provider(job.logdir))
    got = wait_for(
        lambda: (found := _everything(grpc_provider)) == expected and found,
        what="the data server's records to equal the in-process provider's",
    )
    assert sum(len(steps) for steps, _ in got.values()) > 0


def test_a_store_over_the_data_server_holds_every_event(job, grpc_provider):
    """A store reading through the data server decodes every event of the job, lanes and all."""
    store = TimelineStore(grpc_provider)

    def loaded():
        store.refresh(tb_context.RequestContext(), force=True)
        return len(store.snapshot().columns.t) == job.total_events

    wait_for(loaded, what=f"{job.total_events} events through the data server")
    ours, theirs = store.snapshot(), _store(local_provider(job.logdir)).snapshot()
    assert np.array_equal(ours.columns.t, theirs.columns.t)
    assert [lane.label for lane in ours.lanes] == [lane.label for lane in theirs.lanes]
    assert ours.attempts == theirs.attempts


def _store(provider) -> TimelineStore:
    store = TimelineStore(provider)
    store.refresh(tb_context.RequestContext(), force=True)
    return store


@pytest.mark.parametrize(
    "values, shape",
    [
        ([b"one"], []),  # content version 1: a scalar string
        ([b"{}", b"a", b"b"], [3]),  # versions 2 and 3: index and payloads
        ([b"same"], [3]),  # the repeated-value shorthand: one value stands for three
        ([b"x", b"y", b"z", b"w"], [2, 2]),  # a shape the store does not expect
    ],
)
def test_a_string_tensor_reads_as_make_ndarray_flattens_it(values, shape):
    """Any string tensor's strings and shape come out as ``make_ndarray`` flattens them."""
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=values)
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    array = tensor_util.make_ndarray(proto)
    strings, wall_time, batched = tensor_strings(proto, 12.5)
    assert (list(strings), wall_time, batched) == (array.reshape(-1).tolist(), 12.5, array.ndim > 0)


def test_a_tensor_that_is_not_strings_reads_as_make_ndarray_gives_it():
    """A foreign float tensor under a timeline tag comes out as its numbers, for the decoder to
    name and skip, as on the public path."""
    proto = tensor_util.make_tensor_proto(np.array([1.5, 2.5]))
    strings, _, batched = tensor_strings(proto, 0.0)
    assert (list(strings), batched) == ([1.5, 2.5], True)


class _RefusingProvider:
    """A data provider (not TensorBoard's own) whose ``read_tensors`` refuses any read that
    takes in ``refused`` (as ``make_ndarray`` refuses a malformed tensor), else answers as
    ``inner`` does."""

    def __init__(self, inner, refused: tuple[str, str]) -> None:
        self.inner, self.refused = inner, refused

    def list_tensors(self, *args, **kwargs):
        return self.inner.list_tensors(*args, **kwargs)

    def read_tensors(self, ctx, *, run_tag_filter, **kwargs):
        run, tag = self.refused
        if run in run_tag_filter.runs and tag in run_tag_filter.tags:
            raise ValueError("cannot reshape array of size 2 into shape (3,)")
        return self.inner.read_tensors(ctx, run_tag_filter=run_tag_filter, **kwargs)


def test_a_series_another_provider_refuses_is_left_out_and_the_rest_read(job, caplog):
    """When a provider that keeps no tensors we can reach refuses one series, that series is
    left out with a warning naming it, and every other series of the read is read whole."""
    expected = _everything(local_provider(job.logdir))
    refused = sorted(expected)[0]
    with caplog.at_level("WARNING"):
        got = _everything(_RefusingProvider(local_provider(job.logdir), refused))
    assert got == {key: value for key, value in expected.items() if key != refused}
    assert f"run {refused[0]!r}, tag {refused[1]!r}: not read (ValueError" in caplog.text
