"""How each kind of record becomes a TensorBoard summary, built with TensorBoard's own protos.

TensorBoard's data provider hands a plugin only summaries whose ``SummaryMetadata.data_class`` is
set, a field tensorboardX's protos lack; so every summary here is made from ``tensorboard.compat``
protos. The writer turns them into bytes; readers and the plugin recognise them by metadata.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import metadata as custom_scalars_metadata

from tb_monitor import contract

__all__ = [
    "custom_scalars_summary",
    "text_summary",
    "timeline_batch_summary",
    "timeline_metadata",
    "timeline_summary",
]


@cache
def timeline_metadata() -> summary_pb2.SummaryMetadata:
    """Metadata of every timeline record: owned by the timeline plugin, a tensor data class."""
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=contract.PLUGIN_NAME, content=contract.plugin_content()
        ),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )


@cache
def _text_metadata() -> summary_pb2.SummaryMetadata:
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text", content=b""),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )


def _string_tensor(*values: str | bytes, vector: bool = False) -> tensor_pb2.TensorProto:
    """A string tensor: a scalar of one value, or (``vector``) a rank-1 tensor of them. A lone
    surrogate (from a str that came through JSON or a file name) is kept as its escape."""
    dims = [tensor_shape_pb2.TensorShapeProto.Dim(size=len(values))] if vector else []
    return tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=dims),
        string_val=[
            v.encode("utf-8", "backslashreplace") if isinstance(v, str) else v for v in values
        ],
    )


def timeline_summary(kind: str, payload: str | bytes) -> summary_pb2.Summary:
    """One timeline record: ``payload`` is the event's JSON exactly as torch serializes it."""
    return _timeline(kind, _string_tensor(payload))


def timeline_batch_summary(
    kind: str, index: str, payloads: list[str] | list[str | bytes]
) -> summary_pb2.Summary:
    """Several timeline events in one record: a rank-1 string tensor ``[index, *values]``
    (content version 3: the payloads, ``contract.encode_batch``; version 4: the columns'
    values, ``contract.encode_columnar``)."""
    return _timeline(kind, _string_tensor(index, *payloads, vector=True))


def _timeline(kind: str, tensor: tensor_pb2.TensorProto) -> summary_pb2.Summary:
    return summary_pb2.Summary(
        value=[
            summary_pb2.Summary.Value(
                tag=contract.timeline_tag(kind), metadata=timeline_metadata(), tensor=tensor
            )
        ]
    )


def text_summary(tag: str, markdown: str) -> summary_pb2.Summary:
    """A text-dashboard entry (TensorBoard renders it as Markdown)."""
    return summary_pb2.Summary(
        value=[
            summary_pb2.Summary.Value(
                tag=tag, metadata=_text_metadata(), tensor=_string_tensor(markdown)
            )
        ]
    )


@cache
def _custom_scalars_metadata() -> summary_pb2.SummaryMetadata:
    metadata = custom_scalars_metadata.create_summary_metadata()
    metadata.data_class = summary_pb2.DATA_CLASS_TENSOR
    return metadata


def custom_scalars_summary(groups: Iterable[str]) -> summary_pb2.Summary:
    """A Custom Scalars layout: one category per metric group, charting all its metrics together.

    The chart matches the group's tags by prefix, so a new metric in a known group needs no
    new layout; the plugin shows the latest layout written to a run.
    """
    layout = layout_pb2.Layout(
        category=[
            layout_pb2.Category(
                title=group,
                chart=[
                    layout_pb2.Chart(
                        title=group,
                        multiline=layout_pb2.MultilineChartContent(tag=[f"^{re.escape(group)}/"]),
                    )
                ],
            )
            for group in groups
        ]
    )
    return summary_pb2.Summary(
        value=[
            summary_pb2.Summary.Value(
                tag=custom_scalars_metadata.CONFIG_SUMMARY_TAG,
                metadata=_custom_scalars_metadata(),
                tensor=_string_tensor(layout.SerializeToString()),
            )
        ]
    )
