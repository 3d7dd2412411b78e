"""Only the optional C accelerators live here; the metadata is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and tb_monitor uses its
pure-Python accumulator, encoder and step hook (identical behaviour and bytes).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("tb_monitor._accumulator", ["tb_monitor/_accumulator.c"], optional=True),
        Extension("tb_monitor.sinks._encoding", ["tb_monitor/sinks/_encoding.c"], optional=True),
        Extension(
            "tb_monitor.integrations._stepclock",
            ["tb_monitor/integrations/_stepclock.c"],
            optional=True,
        ),
    ],
)
