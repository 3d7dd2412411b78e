"""The agent side of ``tb-monitor run``: what it installs into torchrun's agent process.

- ``tb_monitor.launcher.torchrun``: the agent's own run and sinks, torchelastic's events and
  metrics captured, every failed attempt recorded, the workers' command rewritten;
- ``tb_monitor.launcher.bootstrap``: how each worker starts (its monitor first, then the script);
- ``tb_monitor.launcher.rank_watch``: what the agent sees of its workers' processes.

It stands above the per-rank runtime (``tb_monitor.rank``), whose files it reads, and imports
torch only inside the agent.
"""
