"""Bridges from tb-monitor to the real PyTorch APIs, imported only when asked.

- ``tb_monitor.integrations.torch``: our sinks installed into ``torch.monitor``,
  ``torch.distributed.elastic.metrics`` and ``torch.distributed.elastic.events``.
- ``tb_monitor.integrations.worker``: what ``tb_monitor.init()`` adds inside a torchelastic worker
  (its own start, exception and exit events).
- ``tb_monitor.integrations.lightning``, ``.huggingface``, ``.accelerate``: the framework adapters
  (a Lightning logger and rank-health callback, a transformers ``TrainerCallback``, an Accelerate
  tracker), each importing its framework only when imported itself.

Nothing here is imported by ``import tb_monitor``: torch stays an optional dependency.
"""
