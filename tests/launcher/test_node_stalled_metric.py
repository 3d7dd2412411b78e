"""The agent's stall, put as a torchelastic metric, is the series operators' stall alert reads."""

from __future__ import annotations

import urllib.request

from conftest import need

from tb_monitor import contract
from tb_monitor.launcher import agent_hooks
from tb_monitor.sinks.fanout import Fanout
from tb_monitor.sinks.prometheus import PrometheusSink
from tb_monitor.torch_bridge import install


def test_the_agents_stall_is_served_as_node_stalled_seconds():
    """``_put_stalled(12.5)`` through torch's metrics reaches the agent's /metrics as
    ``tb_monitor_metric_node_stalled_seconds`` of the group the alert reads."""
    need("torch")
    need("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    sink = PrometheusSink(port=0, addr="127.0.0.1", labels={"node": "n0"})
    bridge = install(metric_handler=Fanout([sink]).handlers().metric)
    try:
        agent_hooks._put_stalled(12.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{sink.port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        bridge.close()
        sink.close()
    samples = {
        (s.name, s.labels.get("group")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    key = ("tb_monitor_metric_node_stalled_seconds", contract.NODE_STALLED_GROUP)
    assert samples[key] == 12.5
