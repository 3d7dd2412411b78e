"""The per-rank runtime: what runs inside each training process besides the user's code.

- ``tb_monitor.rank.health``: the step clock and collective timing as Stat windows, heartbeats,
  and ``tb_monitor.step()``;
- ``tb_monitor.rank.grad_wait``: how long DDP's reducer waits for the gradients' all-reduces;
- ``tb_monitor.rank.stacks``: every thread's stack on the agent's signal, and a pulse;
- ``tb_monitor.rank.worker``: a torchelastic worker's own start, exception and exit events.

``Monitor`` installs these (``init(torch=True)``, and inside a worker); torch is imported only
when a recorder is installed, never by ``import tb_monitor``.
"""
