"""torchelastic-compatible telemetry: ``tb_monitor.elastic.metrics`` and ``tb_monitor.elastic.events``.

Same module layout and names as ``torch.distributed.elastic.metrics`` / ``.events``, so code
ports by changing the import prefix; neither needs torch.
"""
