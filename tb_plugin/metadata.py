"""Identity of the Timeline plugin: its name and record layout version, from the data contract."""

from __future__ import annotations

from tb_monitor.contract import CONTENT_VERSION, PLUGIN_NAME

__all__ = ["CONTENT_VERSION", "PLUGIN_NAME", "TAB_NAME"]

#: Title of the dashboard's tab in TensorBoard.
TAB_NAME = "Timeline"
