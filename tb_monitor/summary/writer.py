"""``SummaryWriter``: torch's ``torch.utils.tensorboard.SummaryWriter``, off the caller's thread.

Same constructor, methods, defaults and errors; what lands in the logdir is what torch's writer
writes for the same calls. The caller's thread checks the arguments (``checks``, torch's errors)
and captures them (``snapshot``: tensors cloned on their device, no host synchronisation); the
summaries are built by torch's own builders on the writer's thread (``builders``) and written by
``AsyncWriter``, one per run directory (``filewriter``), so nothing accepted is lost on close,
exit or SIGTERM.

As in torch, ``add_figure`` renders on the caller's thread (``files`` says why), ``add_graph``
traces the model there (it runs the model) and ``add_embedding`` writes its side files there.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tb_monitor._tensors import is_tensor
from tb_monitor.sinks.writer import STALL_S
from tb_monitor.summary import builders, checks, files, snapshot
from tb_monitor.summary.filewriter import FileWriter
from tb_monitor.summary.pending import PendingSummary
from tb_monitor.summary.snapshot import Budget

__all__ = ["MAX_PENDING_BYTES", "SummaryWriter"]

#: Most bytes that captured tensors and arrays may hold while they wait for the writer's thread
#: (a queued histogram holds its copy, on its device); past it a call waits up to ``STALL_S``
#: for the writer, then drops its summary, counted in ``SummaryWriter.dropped`` and in its run's
#: ``tb_monitor/dropped_records``.
MAX_PENDING_BYTES = 256 << 20


class SummaryWriter:
    """Writes TensorBoard summaries as torch's ``SummaryWriter`` does, without stalling training.

    >>> from tb_monitor import SummaryWriter  # was: from torch.utils.tensorboard import ...
    >>> with SummaryWriter("runs/exp1") as writer:
    ...     writer.add_scalar("loss", loss, step)  # a CUDA tensor: no host sync
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] | None = None,
        comment: str = "",
        purge_step: int | None = None,
        max_queue: int = 10,
        flush_secs: float = 120,
        filename_suffix: str = "",
    ) -> None:
        """As torch's. ``flush_secs`` is how often the writer's thread writes (a SIGKILL loses at
        most that; close, exit and SIGTERM lose nothing); ``max_queue`` is kept for compatibility:
        the queue holds up to ``AsyncWriter``'s 65,536 records and ``MAX_PENDING_BYTES``."""
        builders.backend()  # torch or tensorboardX, or an ImportError naming the extra
        if not log_dir:
            now = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", now + "_" + socket.gethostname() + comment)
        self.log_dir = log_dir
        self.purge_step = purge_step
        self.max_queue = max_queue
        self.flush_secs = flush_secs
        self.filename_suffix = filename_suffix
        self.file_writer: FileWriter | None = None
        self.all_writers: dict[str, FileWriter] | None = None
        self._budget = Budget(MAX_PENDING_BYTES, STALL_S)
        self._closed_dropped = 0  # what closed writers dropped
        self._projector: Any = None
        self._get_file_writer()
        self.default_bins = list(builders.default_bins())

    def _get_file_writer(self) -> FileWriter:
        """The writer of ``log_dir``, made again after ``close()`` as torch's is."""
        if self.all_writers is None or self.file_writer is None:
            self.file_writer = writer = self._new_writer(self.log_dir)
            self.all_writers = {writer.get_logdir(): writer}
            if self.purge_step is not None:
                step, self.purge_step = self.purge_step, None
                for event in builders.restart_events(step):
                    writer.add_event(event)
        return self.file_writer

    def _new_writer(self, log_dir: Any) -> FileWriter:
        return FileWriter(log_dir, self.max_queue, self.flush_secs, self.filename_suffix)

    def _writer_of(self, log_dir: str) -> FileWriter:
        """The writer of a sub-run (``add_scalars``, ``add_hparams``), made on first use."""
        self._get_file_writer()
        assert self.all_writers is not None
        if log_dir not in self.all_writers:
            self.all_writers[log_dir] = self._new_writer(log_dir)
        return self.all_writers[log_dir]

    def get_logdir(self) -> str:
        """The directory the main event file is written to."""
        return self.log_dir  # type: ignore[return-value]

    @property
    def dropped(self) -> int:
        """Summaries dropped so far: snapshots past ``MAX_PENDING_BYTES``, and every writer's
        drops (a full queue, storage gone, a summary its builder refused)."""
        writers = (self.all_writers or {}).values()
        return self._closed_dropped + sum(w.writer.dropped for w in writers)

    def _add(
        self,
        make: Callable[..., Any],
        args: tuple,
        kwargs: dict | None = None,
        global_step: Any = None,
        walltime: float | None = None,
        writer: FileWriter | None = None,
    ) -> None:
        """Capture ``args``, ``kwargs`` and the step; ``make`` builds the summary off-thread."""
        if global_step is not None and type(global_step) is not int:
            global_step = snapshot.step(global_step)
        captured = snapshot.capture(global_step, args, kwargs or {})
        writer = writer or self.file_writer or self._get_file_writer()
        if not self._budget.reserve(captured.nbytes):
            writer.writer.count_dropped(1)  # so that it lands in tb_monitor/dropped_records
            return
        writer.add_built(PendingSummary(make, captured, self._budget), walltime)

    def _add_scalar_to(
        self, writer: FileWriter, tag: str, value: Any, global_step: Any, walltime: Any
    ) -> None:
        """A plain scalar: the writer's own fast path (floats, CPU tensors) or a built one."""
        plain = value
        if type(value) is not float and type(value) is not int:
            plain = snapshot.scalar(value)
        if global_step is None:
            global_step = 0
        elif type(global_step) is not int:
            global_step = snapshot.step(global_step)
            plain = None if is_tensor(global_step) else plain  # a tensor: read off-thread
        if plain is None:
            self._add(builders.scalar, (tag, value), None, global_step, walltime, writer)
            return
        writer.writer.add_scalar(tag, plain, walltime, global_step)

    def add_hparams(
        self,
        hparam_dict: dict,
        metric_dict: dict,
        hparam_domain_discrete: dict | None = None,
        run_name: str | None = None,
        global_step: int | None = None,
    ) -> None:
        """Hyperparameters and their metrics for the HParams dashboard, in the sub-run
        ``<logdir>/<run_name>`` (default: the time), as torch's writer does."""
        checks.hparams(hparam_dict, metric_dict, hparam_domain_discrete)
        if not run_name:
            run_name = str(time.time())
        writer = self._writer_of(os.path.join(self._get_file_writer().get_logdir(), run_name))
        for part in range(3):
            args = (part, hparam_dict, metric_dict, hparam_domain_discrete)
            self._add(builders.hparams, args, None, global_step, None, writer)
        for key, value in metric_dict.items():
            self._add_scalar_to(writer, key, value, global_step, None)

    def add_scalar(
        self,
        tag: str,
        scalar_value: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        new_style: bool = False,
        double_precision: bool = False,
    ) -> None:
        """A scalar: a number, a numpy scalar or a one-element tensor (any device, unread)."""
        writer = self.file_writer or self._get_file_writer()
        if new_style or double_precision:
            value = checks.one_element(scalar_value)
            args = (checks.tag(tag), value, new_style, double_precision)
            self._add(builders.scalar, args, None, global_step, walltime, writer)
            return
        self._add_scalar_to(writer, tag, scalar_value, global_step, walltime)

    def add_scalars(
        self,
        main_tag: str,
        tag_scalar_dict: dict[str, Any],
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Scalars under one ``main_tag``, each in its sub-run ``<logdir>/<main_tag>_<tag>``."""
        walltime = time.time() if walltime is None else walltime
        logdir = self._get_file_writer().get_logdir()
        for tag, value in tag_scalar_dict.items():
            writer = self._writer_of(logdir + "/" + main_tag.replace("/", "_") + "_" + tag)
            self._add_scalar_to(writer, main_tag, value, global_step, walltime)

    def add_tensor(
        self, tag: str, tensor: Any, global_step: int | None = None, walltime: float | None = None
    ) -> None:
        """A whole tensor, for TensorBoard's tensor plugin."""
        checks.tensor_proto(tag, tensor)
        self._add(builders.backend().tensor_proto, (tag, tensor), None, global_step, walltime)

    def add_histogram(
        self,
        tag: str,
        values: Any,
        global_step: int | None = None,
        bins: Any = "tensorflow",
        walltime: float | None = None,
        max_bins: int | None = None,
    ) -> None:
        """A histogram of ``values``, binned on the writer's thread."""
        values = checks.values(values)
        checks.bins(bins)
        args = (checks.tag(tag), values, bins, max_bins)
        self._add(builders.histogram, args, None, global_step, walltime)

    def add_histogram_raw(
        self,
        tag: str,
        min: float,
        max: float,
        num: int,
        sum: float,
        sum_squares: float,
        bucket_limits: Any,
        bucket_counts: Any,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """A histogram already binned."""
        checks.same_length(bucket_limits, bucket_counts)
        args = (checks.tag(tag), min, max, num, sum, sum_squares, bucket_limits, bucket_counts)
        self._add(builders.backend().histogram_raw, args, None, global_step, walltime)

    def add_image(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "CHW",
    ) -> None:
        """An image, encoded as PNG on the writer's thread."""
        img_tensor = checks.image(img_tensor, dataformats)
        kwargs = {"dataformats": dataformats}
        self._add(builders.backend().image, (tag, img_tensor), kwargs, global_step, walltime)

    def add_images(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "NCHW",
    ) -> None:
        """A batch of images, as one grid."""
        self.add_image(tag, img_tensor, global_step, walltime, dataformats)

    def add_image_with_boxes(
        self,
        tag: str,
        img_tensor: Any,
        box_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        rescale: int = 1,
        dataformats: str = "CHW",
        labels: Any = None,
    ) -> None:
        """An image with boxes drawn on it (and their labels, when one per box)."""
        labels = checks.box_labels(labels, box_tensor)
        img_tensor = checks.image(img_tensor, dataformats)
        box_tensor = checks.array(box_tensor)
        kwargs = {"rescale": rescale, "dataformats": dataformats, "labels": labels}
        args = (tag, img_tensor, box_tensor)
        self._add(builders.backend().image_boxes, args, kwargs, global_step, walltime)

    def add_figure(
        self,
        tag: str,
        figure: Any,
        global_step: int | None = None,
        close: bool = True,
        walltime: float | None = None,
    ) -> None:
        """A matplotlib figure (or a list of them), rendered here: see the module docstring."""
        image = files.figure_to_image(figure, close)
        dataformats = "NCHW" if isinstance(figure, list) else "CHW"
        self.add_image(tag, image, global_step, walltime, dataformats=dataformats)

    def add_video(
        self,
        tag: str,
        vid_tensor: Any,
        global_step: int | None = None,
        fps: float = 4,
        walltime: float | None = None,
    ) -> None:
        """A video ``(N, T, C, H, W)``, encoded as a GIF on the writer's thread (moviepy)."""
        vid_tensor = checks.video(vid_tensor)
        self._add(builders.backend().video, (tag, vid_tensor, fps), None, global_step, walltime)

    def add_audio(
        self,
        tag: str,
        snd_tensor: Any,
        global_step: int | None = None,
        sample_rate: int = 44100,
        walltime: float | None = None,
    ) -> None:
        """A mono sound in ``[-1, 1]``, encoded as WAV on the writer's thread."""
        snd_tensor = checks.audio(snd_tensor)
        kwargs = {"sample_rate": sample_rate}
        self._add(builders.backend().audio, (tag, snd_tensor), kwargs, global_step, walltime)

    def add_text(
        self,
        tag: str,
        text_string: str,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Text (Markdown) for the text dashboard, under the tag ``<tag>/text_summary``."""
        text_string.encode  # noqa: B018 (torch's AttributeError for what is not text)
        args = (checks.tag(tag), text_string)
        self._add(builders.backend().text, args, None, global_step, walltime)

    def add_onnx_graph(self, prototxt: str) -> None:
        """An ONNX model's graph (read here, with the ``onnx`` package, as torch does)."""
        from torch.utils.tensorboard._onnx_graph import load_onnx_graph

        self._get_file_writer().add_onnx_graph(load_onnx_graph(prototxt))

    def add_graph(
        self,
        model: Any,
        input_to_model: Any = None,
        verbose: bool = False,
        use_strict_trace: bool = True,
    ) -> None:
        """The model's graph, traced here (it runs the model), written off-thread."""
        from torch.utils.tensorboard._pytorch_graph import graph

        profile = graph(model, input_to_model, verbose, use_strict_trace)
        self._get_file_writer().add_graph(profile)

    def add_embedding(
        self,
        mat: Any,
        metadata: Any = None,
        label_img: Any = None,
        global_step: int | None = None,
        tag: str = "default",
        metadata_header: Any = None,
    ) -> None:
        """Vectors for the projector, written as torch writes them (``files.Projector``)."""
        if self._projector is None:
            self._projector = files.Projector()
        logdir = self._get_file_writer().get_logdir()
        self._projector.add(logdir, mat, metadata, label_img, global_step, tag, metadata_header)

    def add_pr_curve(
        self,
        tag: str,
        labels: Any,
        predictions: Any,
        global_step: int | None = None,
        num_thresholds: int = 127,
        weights: Any = None,
        walltime: float | None = None,
    ) -> None:
        """A precision-recall curve, computed on the writer's thread."""
        args = (tag, checks.array(labels), checks.array(predictions), num_thresholds, weights)
        self._add(builders.pr_curve, args, None, global_step, walltime)

    def add_pr_curve_raw(
        self,
        tag: str,
        true_positive_counts: Any,
        false_positive_counts: Any,
        true_negative_counts: Any,
        false_negative_counts: Any,
        precision: Any,
        recall: Any,
        global_step: int | None = None,
        num_thresholds: int = 127,
        weights: Any = None,
        walltime: float | None = None,
    ) -> None:
        """A precision-recall curve already computed."""
        counts = (true_positive_counts, false_positive_counts)
        counts += (true_negative_counts, false_negative_counts, precision, recall)
        args = (tag, *counts, num_thresholds, weights)
        self._add(builders.backend().pr_curve_raw, args, None, global_step, walltime)

    def add_custom_scalars_multilinechart(
        self, tags: list[str], category: str = "default", title: str = "untitled"
    ) -> None:
        """A Custom Scalars chart of several tags as lines."""
        self.add_custom_scalars({category: {title: ["Multiline", tags]}})

    def add_custom_scalars_marginchart(
        self, tags: list[str], category: str = "default", title: str = "untitled"
    ) -> None:
        """A Custom Scalars chart of a value and its lower and upper bounds (3 tags)."""
        if len(tags) != 3:
            raise AssertionError(f"Expected 3 tags, got {len(tags)}.")
        self.add_custom_scalars({category: {title: ["Margin", tags]}})

    def add_custom_scalars(self, layout: dict) -> None:
        """The Custom Scalars dashboard's layout: ``{category: {title: [kind, tags]}}``."""
        checks.layout(layout)
        self._add(builders.backend().custom_scalars, (layout,))

    def add_mesh(
        self,
        tag: str,
        vertices: Any,
        colors: Any = None,
        faces: Any = None,
        config_dict: dict | None = None,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """A 3D mesh or point cloud, for the mesh plugin."""
        args = (tag, vertices, colors, faces, config_dict)
        self._add(builders.backend().mesh, args, None, global_step, walltime)

    def flush(self) -> None:
        """Write everything accepted so far, in every run of this writer, and sync it."""
        for writer in (self.all_writers or {}).values():
            writer.flush()

    def close(self) -> None:
        """Flush and close every run's event file; a later call opens new ones, as torch's."""
        if self.all_writers is None:
            return
        for writer in self.all_writers.values():
            writer.close()
            self._closed_dropped += writer.writer.dropped
        self.file_writer = self.all_writers = None

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
