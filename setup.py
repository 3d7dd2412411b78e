"""Only the optional C accelerators live here; the metadata is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and tb_monitor uses its
pure-Python accumulator, encoder, step hook, event-file reader and columnar index reader
(identical behaviour, bytes and records). All five share ``tb_monitor/_module.h``, their module
init; the encoder and the event-file reader share ``tb_monitor/_crc32c.h``, TFRecord's checksum.
"""

from setuptools import Extension, setup


def _accelerator(name: str) -> Extension:
    """The optional extension ``tb_monitor.<name>``, built from ``tb_monitor/<name>.c``."""
    return Extension(
        f"tb_monitor.{name}",
        [f"tb_monitor/{name.replace('.', '/')}.c"],
        include_dirs=["tb_monitor"],
        depends=["tb_monitor/_module.h", "tb_monitor/_crc32c.h"],
        optional=True,
    )


setup(
    ext_modules=[
        _accelerator("_accumulator"),
        _accelerator("sinks._encoding"),
        _accelerator("rank._stepclock"),
        _accelerator("logdir._string_tensors"),
        _accelerator("contract._columnar_index"),
    ],
)
