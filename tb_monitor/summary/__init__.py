"""``tb_monitor.SummaryWriter``: a drop-in for ``torch.utils.tensorboard.SummaryWriter`` whose
caller's thread only checks and captures; summaries are built and written off it.

    >>> from tb_monitor import SummaryWriter  # was: from torch.utils.tensorboard import ...

Importing this package imports neither torch nor tensorboardX; the first ``SummaryWriter``
does (``builders.backend``).
"""

from __future__ import annotations

from tb_monitor.summary.filewriter import FileWriter
from tb_monitor.summary.writer import MAX_PENDING_BYTES, SummaryWriter

__all__ = ["MAX_PENDING_BYTES", "FileWriter", "SummaryWriter"]
