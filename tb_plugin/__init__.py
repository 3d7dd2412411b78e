"""The Timeline dashboard: a TensorBoard plugin drawing rendezvous, agent and worker events.

TensorBoard finds it through the ``tensorboard_plugins`` entry point
(``tb_plugin.plugin:TimelineLoader``); ``tensorboard --logdir runs/`` shows a **Timeline** tab
when any run holds timeline records.
"""

from __future__ import annotations

from tb_plugin.metadata import PLUGIN_NAME

__all__ = ["PLUGIN_NAME"]
