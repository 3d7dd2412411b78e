"""A fake torchelastic worker: the bootstrap's automatic monitor, then the script's own ``init``
with another logdir and settings. Prints whether ``init`` returned the automatic monitor.

usage: adopt_twice.py OTHER_LOGDIR
"""

import sys

import tb_monitor
from tb_monitor.monitor import init_automatic

automatic = init_automatic()
own = tb_monitor.init(sys.argv[1], flush_secs=5, rank_health=False)
print("adopted" if own is automatic and not own.automatic else "replaced")
tb_monitor.init(sys.argv[1])  # adopted already: an ordinary second init, which warns as before
