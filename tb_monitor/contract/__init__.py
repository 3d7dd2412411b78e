"""The data contract between the writers and the readers (plugin, notebooks, exports).

Everything that decides how a record looks in a TensorBoard logdir lives in this package, so
the writer side and the reading side (``tb_plugin``, ``tb_monitor.readers``,
``tb_monitor.export``) can never drift apart. Import it whole (``from tb_monitor import
contract``; ``contract.stat_tag(...)``); its modules split it by job:

- ``tags``: tag names, the timeline kinds and the plugin's metadata;
- ``runs``: run names, one run directory per process role and rank;
- ``ranks``: the rank-health tags;
- ``records``: a timeline record decoded into one flat dict;
- ``batches``: content versions 2 to 4, several events per record;
- ``columnar``: content versions 4 and 5, a record's events as columns.

See ``docs/DESIGN.md`` for the reasoning behind each rule.
"""

from tb_monitor.contract.batches import (
    DecodedRecords,
    Unreadable,
    decode_records,
    encode_batch,
    record_events,
)
from tb_monitor.contract.columnar import (
    ColumnarBatch,
    ParsedRecord,
    SteppedRecords,
    encode_columnar,
    event_offsets,
)
from tb_monitor.contract.ranks import (
    NODE_STALLED,
    NODE_STALLED_GROUP,
    RANK_BEATS,
    RANK_COLLECTIVE,
    RANK_CPU_RUN,
    RANK_CPU_THROTTLED,
    RANK_CPU_WAIT,
    RANK_GRAD_WAIT,
    RANK_PREFIX,
    RANK_STEP,
    RANK_STEP_QUANTILES,
    RANK_WINDOW_S,
    STACKS_DIR_ENV,
    STACKS_SIGNAL_ENV,
    beat_tag,
)
from tb_monitor.contract.records import FIELDS, decode_record, is_heartbeat, read_keys
from tb_monitor.contract.runs import agent_run_name, encode_part, rank_of, run_name_from_env
from tb_monitor.contract.tags import (
    AGENT,
    AGENT_HUNG,
    AGENT_STOPPING,
    CONTENT_VERSION,
    FR_COLLECTIVE,
    HELD_STATES,
    KINDS,
    LOGDIR_ENV,
    MONITOR,
    PLUGIN_NAME,
    RANK_CAPTURE,
    RANK_SEEN,
    RANK_STACKS,
    RENDEZVOUS,
    SEEN_SILENT,
    SEEN_STOPPED,
    SEEN_UNINTERRUPTIBLE,
    STAT_EVENT,
    TIMELINE_PREFIX,
    WORKER,
    kind_of_tag,
    metric_tag,
    plugin_content,
    stat_tag,
    timeline_tag,
)

__all__ = [
    "AGENT",
    "CONTENT_VERSION",
    "FR_COLLECTIVE",
    "FIELDS",
    "HELD_STATES",
    "KINDS",
    "LOGDIR_ENV",
    "MONITOR",
    "PLUGIN_NAME",
    "NODE_STALLED",
    "NODE_STALLED_GROUP",
    "RANK_BEATS",
    "RANK_COLLECTIVE",
    "RANK_CPU_RUN",
    "RANK_CPU_THROTTLED",
    "RANK_CPU_WAIT",
    "RANK_GRAD_WAIT",
    "RANK_PREFIX",
    "AGENT_HUNG",
    "AGENT_STOPPING",
    "RANK_CAPTURE",
    "RANK_SEEN",
    "RANK_STACKS",
    "RANK_STEP",
    "RANK_STEP_QUANTILES",
    "RANK_WINDOW_S",
    "RENDEZVOUS",
    "SEEN_SILENT",
    "SEEN_STOPPED",
    "SEEN_UNINTERRUPTIBLE",
    "STACKS_DIR_ENV",
    "STACKS_SIGNAL_ENV",
    "STAT_EVENT",
    "TIMELINE_PREFIX",
    "WORKER",
    "ColumnarBatch",
    "DecodedRecords",
    "ParsedRecord",
    "SteppedRecords",
    "Unreadable",
    "agent_run_name",
    "encode_part",
    "beat_tag",
    "decode_record",
    "decode_records",
    "encode_batch",
    "encode_columnar",
    "event_offsets",
    "is_heartbeat",
    "kind_of_tag",
    "metric_tag",
    "plugin_content",
    "rank_of",
    "read_keys",
    "record_events",
    "run_name_from_env",
    "stat_tag",
    "timeline_tag",
]
