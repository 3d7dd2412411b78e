"""What ``SummaryWriter`` keeps on the caller's thread, as torch does: rendering a matplotlib
figure, and the projector's side files of ``add_embedding``.

A figure is rendered where it is drawn: pyplot is not thread-safe, and the caller may change or
close the figure as soon as the call returns. ``add_embedding`` writes files, not events
(``<logdir>/<step>/<tag>/tensors.tsv``, ``metadata.tsv``, ``sprite.png`` and the run's
``projector_config.pbtxt``), with torch's own helpers through TensorBoard's ``gfile`` (local
paths, and ``s3://`` with boto3); it is called once or twice a run, never per step.
"""

from __future__ import annotations

import logging
from typing import Any

from tb_monitor.summary import builders

__all__ = ["Projector", "figure_to_image"]

_log = logging.getLogger(__name__)


def figure_to_image(figure: Any, close: bool = True) -> Any:
    """The figure (or list of figures) as a CHW (NCHW) uint8 array, by the backend's renderer."""
    return builders.utils().figure_to_image(figure, close)


def _encode(tag: str) -> str:
    """A tag as one path component, encoded as torch's writer encodes it."""
    for char in "%/\\":
        tag = tag.replace(char, f"%{ord(char):02x}")
    return tag


class Projector:
    """The embeddings of one writer and their ``projector_config.pbtxt``, which lists them all
    (rewritten whole each time: object stores cannot append)."""

    def __init__(self) -> None:
        from tensorboard.plugins.projector.projector_config_pb2 import ProjectorConfig

        self._config = ProjectorConfig()

    def add(
        self,
        logdir: str,
        mat: Any,
        metadata: Any,
        label_img: Any,
        global_step: int | None,
        tag: str,
        metadata_header: Any,
    ) -> None:
        """Write one embedding's files and the updated config; torch's errors for bad input."""
        from google.protobuf import text_format
        from tensorboard.compat import tf
        from torch.utils.tensorboard import _embedding

        mat = builders.make_np(mat)
        global_step = 0 if global_step is None else global_step
        subdir = f"{str(global_step).zfill(5)}/{_encode(tag)}"
        save_path = _embedding._gfile_join(logdir, subdir)
        _make_dir(tf.io.gfile, save_path)
        if metadata is not None:
            if mat.shape[0] != len(metadata):
                raise AssertionError("#labels should equal with #data points")
            _embedding.make_tsv(metadata, save_path, metadata_header=metadata_header)
        if label_img is not None:
            if mat.shape[0] != label_img.shape[0]:
                raise AssertionError("#images should equal with #data points")
            _embedding.make_sprite(label_img, save_path)
        if mat.ndim != 2:
            raise AssertionError("mat should be 2D, where mat.size(0) is the number of data points")
        _embedding.make_mat(mat, save_path)
        info = _embedding.get_embedding_info(metadata, label_img, subdir, global_step, tag)
        self._config.embeddings.extend([info])
        _embedding.write_pbtxt(logdir, text_format.MessageToString(self._config))


def _make_dir(gfile: Any, path: str) -> None:
    """Make ``path``; an existing directory is a warning (the step was reused), a file an error."""
    if not gfile.exists(path):
        gfile.makedirs(path)
    elif gfile.isdir(path):
        _log.warning("Embedding dir exists, did you set global_step for add_embedding()?")
    else:
        raise NotADirectoryError(f"Path: `{path}` exists, but is a file. Cannot proceed.")
