"""The sinks, through every kind of writer, read back with TensorBoard's own loader."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone

import pytest
import tensorboardX
from tb_loaders import load, timeline_payloads
from tensorboard.compat.proto import summary_pb2
from tensorboard.plugins.custom_scalar import layout_pb2

from tb_monitor import (
    Aggregation,
    Event,
    Stat,
    contract,
    register_event_handler,
    unregister_event_handler,
)
from tb_monitor.elastic import events, metrics
from tb_monitor.logdir import readers
from tb_monitor.sinks import (
    AsyncWriter,
    TensorboardEventHandler,
    TensorboardLoggingHandler,
    TensorboardMetricHandler,
)

WRITERS = ["tensorboardX", "torch", "logdir", "AsyncWriter"]


def _make_writer(kind: str, logdir, request):
    if kind == "tensorboardX":
        return tensorboardX.SummaryWriter(str(logdir))
    if kind == "torch":
        request.getfixturevalue("torch")  # skips, or fails in CI, without torch
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(logdir))
    if kind == "logdir":
        return str(logdir)
    return AsyncWriter(logdir)


def _close(handler, writer) -> None:
    handler.close()
    if not isinstance(writer, str):
        writer.close()


@pytest.mark.parametrize("kind", WRITERS)
def test_pytorch_stat_test_holds(logdir, kind, request):
    """PyTorch's own test: Stat asdf [SUM, COUNT], 0..9 reads back as sum [10], count [5]."""
    writer = _make_writer(kind, logdir, request)
    handler = TensorboardEventHandler(writer)
    handle = register_event_handler(handler)
    stat = Stat("asdf", [Aggregation.SUM, Aggregation.COUNT], timedelta(hours=1), 5)
    for i in range(10):
        stat.add(i)
    assert stat.count == 0
    unregister_event_handler(handle)
    _close(handler, writer)
    loaded = load(logdir)
    scalar_dict = loaded.multiplexer.PluginRunToTagToContent("scalars")
    raw = {
        tag: loaded.multiplexer.Tensors(run, tag)
        for run, run_dict in scalar_dict.items()
        for tag in run_dict
    }
    scalars = {tag: [e.tensor_proto.float_val[0] for e in events] for tag, events in raw.items()}
    assert scalars == {"asdf.sum": [10], "asdf.count": [5]}


def test_handler_is_a_drop_in_for_torch_monitor(logdir, torch):
    """Registered with torch.monitor itself, the handler writes torch's Stat windows."""
    with AsyncWriter(logdir) as writer:
        handle = torch.monitor.register_event_handler(TensorboardEventHandler(writer))
        stat = torch.monitor.Stat(
            "asdf",
            [torch.monitor.Aggregation.SUM, torch.monitor.Aggregation.COUNT],
            timedelta(hours=1),
            5,
        )
        for i in range(10):
            stat.add(i)
        torch.monitor.unregister_event_handler(handle)
    assert load(logdir).scalars() == {".": {"asdf.sum": [(0, 10.0)], "asdf.count": [(0, 5.0)]}}


@pytest.mark.parametrize("kind", WRITERS)
def test_other_events_become_text_and_timeline(logdir, kind, request):
    """A non-Stat event is a readable Markdown table and a timeline record the plugin is handed."""
    writer = _make_writer(kind, logdir, request)
    handler = TensorboardEventHandler(writer)
    when = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    handler(Event("checkpoint", when, {"path": "a|b", "epoch": 3}))
    _close(handler, writer)
    loaded = load(logdir)
    [text] = loaded.tensors("text")["."]["checkpoint"]
    assert text.numpy.item().decode() == (
        "| key | value |\n| --- | --- |\n| path | a\\|b |\n| epoch | 3 |\n"
    )
    [record] = loaded.tensors(contract.PLUGIN_NAME)["."]["timeline/monitor"]
    assert record.wall_time == when.timestamp()
    [payload] = timeline_payloads(record)
    assert json.loads(payload) == {
        "name": "checkpoint",
        "timestamp": when.timestamp(),
        "data": {"path": "a|b", "epoch": 3},
    }


def test_tensorboardx_keeps_the_data_class_tensorboard_needs(logdir):
    """Timeline records written through tensorboardX keep SummaryMetadata.data_class on disk."""
    writer = tensorboardX.SummaryWriter(str(logdir))
    TensorboardEventHandler(writer)(Event("e", datetime.now(), {}))
    writer.close()
    metadata = load(logdir).multiplexer.SummaryMetadata(".", "timeline/monitor")
    assert metadata.data_class == summary_pb2.DATA_CLASS_TENSOR
    assert metadata.plugin_data.plugin_name == contract.PLUGIN_NAME


@pytest.mark.parametrize("kind", WRITERS)
def test_metrics_become_scalars_per_group_with_a_layout(logdir, kind, request):
    """Metrics land as <group>/<name> with per-tag steps and one layout category per group."""
    writer = _make_writer(kind, logdir, request)
    handler = TensorboardMetricHandler(writer)
    metrics.configure(handler, "train")
    metrics.configure(handler, "eval")
    try:
        metrics.put_metric("loss", 4, "train")
        metrics.put_metric("loss", 3, "train")
        metrics.put_metric("acc", 1, "eval")
    finally:
        metrics.configure(metrics.NullMetricHandler(), "train")
        metrics.configure(metrics.NullMetricHandler(), "eval")
    _close(handler, writer)
    loaded = load(logdir)
    assert loaded.scalars()["."] == {"train/loss": [(0, 4.0), (1, 3.0)], "eval/acc": [(0, 1.0)]}
    layouts = loaded.tensors("custom_scalars")["."]["custom_scalars__config__"]
    layout = layout_pb2.Layout.FromString(layouts[-1].numpy.item())
    assert [c.title for c in layout.category] == ["train", "eval"]
    assert list(layout.category[0].chart[0].multiline.tag) == ["^train/"]


def _events_logger(handler):
    logger = logging.Logger("test-events")
    logger.addHandler(handler)
    return logger


def test_logging_handler_writes_each_event_kind(logdir):
    """Agent, worker and rendezvous events become timeline records with torch's JSON and times."""
    agent = events.Event("agent.start", events.EventSource.AGENT, 0, {"state": "INIT"})
    worker = events.Event("w.done", events.EventSource.WORKER, 5_000, {"state": "SUCCEEDED"})
    rdzv = events.RdzvEvent("join", "r1", "joined", "host", 42, events.NodeState.RUNNING, rank=2)
    with AsyncWriter(logdir) as writer:
        handler = TensorboardLoggingHandler(writer)
        events.register_destination("sink-test", handler)
        for event in (agent, worker):
            events.record(event, "sink-test")
        logger = _events_logger(handler)
        logger.info(rdzv.serialize())  # torch's own record(): the JSON only, no tb_event
    records = {r.kind: r for r in readers.iter_timeline(logdir)}
    assert {kind: r.payload for kind, r in records.items()} == {
        "agent": agent.serialize(),
        "worker": worker.serialize(),
        "rendezvous": rdzv.serialize(),
    }
    assert records["worker"].wall_time == 5.0
    assert records["agent"].wall_time > 1e9  # the log record's time, not torch's 0
    texts = load(logdir).tensors("text")["."]
    [line] = texts["events/rendezvous"]
    assert line.numpy.item().decode() == "**join** · RUNNING · host:42 · rank 2 · joined"


def test_logging_handler_ignores_other_messages_once(logdir, caplog):
    """A log line that is not an event is ignored with a single warning."""
    with AsyncWriter(logdir) as writer:
        logger = _events_logger(TensorboardLoggingHandler(writer))
        with caplog.at_level(logging.WARNING):
            logger.info("hello")
            logger.info("[1, 2]")
    assert list(readers.iter_timeline(logdir)) == []
    assert caplog.text.count("not torchelastic events") == 1


def test_handler_given_a_closed_writer_is_rejected_by_name(logdir):
    """Constructing a sink on a closed AsyncWriter raises a ValueError naming it."""
    writer = AsyncWriter(logdir)
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        TensorboardEventHandler(writer)


def test_writer_closed_later_is_logged_once_never_raised(logdir, caplog):
    """Sinks whose writer is closed under them log it once and keep the caller running."""
    writer = AsyncWriter(logdir)
    monitor_handler = TensorboardEventHandler(writer)
    metric_handler = TensorboardMetricHandler(writer)
    writer.close()
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            monitor_handler(Event("e", datetime.now(), {}))
            metric_handler.emit(metrics.MetricData(1.0, "g", "m", 1))
    assert caplog.text.count("is closed; dropping its records") == 2


def test_unknown_writer_type_is_named(logdir):
    """Anything that is not a writer or a path raises a TypeError naming it."""
    with pytest.raises(TypeError, match="got 42"):
        TensorboardEventHandler(42)
