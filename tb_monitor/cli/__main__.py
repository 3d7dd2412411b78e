"""``python -m tb_monitor.cli``: the ``tb-monitor`` command without its console script."""

import sys

from tb_monitor.cli import main

sys.exit(main())
