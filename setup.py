"""Only the optional C accelerator lives here; the metadata is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and tb_monitor uses its
pure-Python accumulator.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[Extension("tb_monitor._speedups", ["tb_monitor/_speedups.c"], optional=True)],
)
