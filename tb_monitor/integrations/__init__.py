"""Framework adapters: tb-monitor inside the frameworks people train with.

- ``tb_monitor.integrations.lightning``: a Lightning logger and a rank-health callback;
- ``tb_monitor.integrations.huggingface``: a transformers ``TrainerCallback`` (in place of
  ``TensorBoardCallback``);
- ``tb_monitor.integrations.accelerate``: an Accelerate tracker.

Each imports its framework (and so torch) when it is imported itself, and nothing of tb-monitor
imports them: ``import tb_monitor`` never loads a framework.
"""
