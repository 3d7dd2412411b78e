"""tb_monitor.SummaryWriter writes what torch's SummaryWriter writes, and refuses what it refuses.

Each call is made on both writers, into two logdirs; TensorBoard's own loader reads both back and
every Event of every run must be the same, wall times aside.
"""

from __future__ import annotations

import pytest
from conftest import need
from summary_events import events_by_run, summaries

from tb_monitor import SummaryWriter

torch = need("torch")
np = need("numpy")
from torch.utils.tensorboard import SummaryWriter as TorchWriter  # noqa: E402


def _seeded(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(7))


def _figure():
    matplotlib = need("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2, 1), dpi=40)
    figure.add_subplot().plot([0, 1, 4])
    return figure


CALLS = {
    "scalar": lambda w: w.add_scalar("loss", 0.25, 3),
    "scalar-no-step": lambda w: w.add_scalar("loss", 7),
    "scalar-tensor": lambda w: w.add_scalar("loss", torch.tensor([1.5]), 2, walltime=5.0),
    "scalar-numpy": lambda w: w.add_scalar("loss", np.float64(2.5), np.int64(4)),
    "scalar-float-step": lambda w: w.add_scalar("loss", 1.0, 2.0),
    "histogram-float-step": lambda w: w.add_histogram("h", np.ones(3), 4.0),
    "scalar-new-style": lambda w: w.add_scalar("x", 1 / 3, 1, new_style=True),
    "scalar-double": lambda w: w.add_scalar("x", 1 / 3, 1, new_style=True, double_precision=True),
    "scalars": lambda w: [w.add_scalars("run/a", {"x": i, "y": -i}, i) for i in range(3)],
    "tensor": lambda w: w.add_tensor("t", torch.arange(6.0).reshape(2, 3), 1),
    "tensor-half": lambda w: w.add_tensor("t", torch.ones(3, dtype=torch.float16)),
    "histogram": lambda w: w.add_histogram("h", torch.randn(500, generator=torch.Generator()), 2),
    "histogram-numpy-auto": lambda w: w.add_histogram("h", np.arange(100.0), bins="auto"),
    "histogram-max-bins": lambda w: w.add_histogram("h", np.arange(1000.0), 0, max_bins=10),
    "histogram-raw": lambda w: w.add_histogram_raw(
        "r", 0, 9, 10, 45, 285, [3.0, 6.0, 9.0], [3, 3, 4], 5
    ),
    "image": lambda w: w.add_image("i", _seeded(3, 8, 6), 1),
    "image-hwc-uint8": lambda w: w.add_image(
        "i", (_seeded(8, 6, 1) * 255).to(torch.uint8).numpy(), dataformats="HWC"
    ),
    "image-hw": lambda w: w.add_image("i", _seeded(5, 4), dataformats="HW"),
    "images": lambda w: w.add_images("i", _seeded(5, 3, 4, 4), 2),
    "image-with-boxes": lambda w: w.add_image_with_boxes(
        "b", _seeded(3, 16, 16), torch.tensor([[1, 1, 8, 8], [4, 4, 12, 12]]), 1, labels=["a", "b"]
    ),
    "figure": lambda w: w.add_figure("f", _figure(), 1),
    "figures": lambda w: w.add_figure("f", [_figure(), _figure()], 1),
    "video": lambda w: w.add_video("v", _seeded(1, 2, 3, 4, 4), 1),
    "audio": lambda w: w.add_audio("a", torch.linspace(-1, 1, 200), 1, sample_rate=8000),
    "text": lambda w: w.add_text("notes", "**hello**", 4),
    "pr-curve": lambda w: w.add_pr_curve(
        "pr", torch.tensor([1, 0, 1, 1]), torch.tensor([0.9, 0.2, 0.6, 0.4]), 1
    ),
    "pr-curve-raw": lambda w: w.add_pr_curve_raw(
        "pr", [4, 2], [3, 1], [0, 2], [0, 2], [0.5, 0.6], [1.0, 0.5], 1, num_thresholds=2
    ),
    "custom-scalars": lambda w: w.add_custom_scalars(
        {"cat": {"loss": ["Multiline", ["a", "b"]], "m": ["Margin", ["v", "lo", "hi"]]}}
    ),
    "multilinechart": lambda w: w.add_custom_scalars_multilinechart(["a", "b"], "c", "t"),
    "marginchart": lambda w: w.add_custom_scalars_marginchart(["v", "lo", "hi"]),
    "mesh": lambda w: w.add_mesh(
        "m",
        torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]]),
        colors=torch.tensor([[[255, 0, 0], [0, 255, 0], [0, 0, 255]]]),
        faces=torch.tensor([[[0, 1, 2]]]),
        global_step=1,
    ),
    "hparams": lambda w: w.add_hparams(
        {"lr": 0.1, "opt": "adam", "wd": None, "n": torch.tensor([3.0])},
        {"acc": 0.9, "loss": torch.tensor(0.5)},
        run_name="trial",
        global_step=2,
    ),
    "hparams-domains": lambda w: w.add_hparams(
        {"opt": "adam", "bs": 32}, {"acc": 1}, {"opt": ["adam", "sgd"]}, run_name="t"
    ),
    "graph": lambda w: w.add_graph(torch.nn.Linear(3, 2), torch.zeros(1, 3)),
}


@pytest.mark.filterwarnings("ignore:`torch.jit.trace")  # add_graph's, in torch
@pytest.mark.parametrize("name", CALLS)
def test_every_method_writes_the_events_torch_writes(name, tmp_path):
    """The same call on both writers leaves the same Events in the same runs, in order."""
    call = CALLS[name]
    torch.manual_seed(0)
    with TorchWriter(tmp_path / "torch") as theirs:
        call(theirs)
    torch.manual_seed(0)
    with SummaryWriter(tmp_path / "ours") as ours:
        call(ours)
    expected = events_by_run(tmp_path / "torch")
    assert len(summaries(tmp_path / "torch")) > 0 or name.startswith("graph")
    assert events_by_run(tmp_path / "ours") == expected, summaries(tmp_path / "ours")


def test_purge_step_writes_the_restart_events_torch_writes(tmp_path):
    """purge_step leaves the same file_version and SessionLog START at that step."""
    for kind, cls in (("torch", TorchWriter), ("ours", SummaryWriter)):
        with cls(tmp_path / kind, purge_step=5) as writer:
            writer.add_scalar("x", 1.0, 5)
    assert events_by_run(tmp_path / "ours") == events_by_run(tmp_path / "torch")


def test_a_closed_writer_reopens_on_the_next_call_as_torch_does(tmp_path):
    """A call after close() writes to a new event file of the same run."""
    for kind, cls in (("torch", TorchWriter), ("ours", SummaryWriter)):
        writer = cls(tmp_path / kind)
        writer.add_scalar("x", 1.0, 1)
        writer.close()
        writer.add_scalar("x", 2.0, 2)
        writer.close()
    assert len(list((tmp_path / "ours").glob("*tfevents*"))) == 2
    ours = sorted(events_by_run(tmp_path / "ours")["."])
    assert ours == sorted(events_by_run(tmp_path / "torch")["."])


def test_the_default_logdir_is_runs_time_host_comment(tmp_path, monkeypatch):
    """Without log_dir: runs/<time>_<host><comment>, as torch names it."""
    monkeypatch.chdir(tmp_path)
    with SummaryWriter(comment="_lr0.1") as writer:
        logdir = writer.get_logdir()
    theirs = TorchWriter(comment="_lr0.1")
    theirs.close()
    assert logdir.startswith("runs/") and logdir.endswith("_lr0.1")
    assert logdir.split("_", 2)[2] == theirs.get_logdir().split("_", 2)[2]


def test_embeddings_leave_the_files_torch_leaves(tmp_path):
    """add_embedding writes the same tensors, metadata, sprite and projector config."""
    mat, labels = _seeded(4, 3), ["a", "b", "c", "d"]
    for kind, cls in (("torch", TorchWriter), ("ours", SummaryWriter)):
        with cls(tmp_path / kind) as writer:
            writer.add_embedding(mat, labels, _seeded(4, 3, 2, 2), global_step=1, tag="e/1")
            writer.add_embedding(mat * 2, global_step=2)
    files = lambda d: {  # noqa: E731
        str(p.relative_to(d)): p.read_bytes()
        for p in d.rglob("*")
        if p.is_file()
        if not p.name.startswith("events.out.")
    }
    assert files(tmp_path / "ours") == files(tmp_path / "torch")
    assert len(files(tmp_path / "ours")) == 5


BAD_CALLS = {
    "scalar-two-elements": lambda w: w.add_scalar("x", torch.ones(2)),
    "scalar-list": lambda w: w.add_scalar("x", [1.0]),
    "scalar-text": lambda w: w.add_scalar("x", "abc"),
    "scalar-bad-step": lambda w: w.add_scalar("x", 1.0, "one"),
    "histogram-bad-step": lambda w: w.add_histogram("h", np.ones(3), "one"),
    "histogram-empty": lambda w: w.add_histogram("h", torch.tensor([])),
    "histogram-list": lambda w: w.add_histogram("h", [1.0, 2.0]),
    "histogram-bad-bins": lambda w: w.add_histogram("h", torch.ones(3), bins="nope"),
    "image-format-twice": lambda w: w.add_image("i", torch.ones(3, 4, 4), dataformats="CCH"),
    "image-wrong-rank": lambda w: w.add_image("i", torch.ones(4, 4)),
    "images-two-channels": lambda w: w.add_images("i", torch.ones(2, 2, 4, 4)),
    "video-four-dims": lambda w: w.add_video("v", torch.ones(2, 3, 4, 4)),
    "audio-two-dims": lambda w: w.add_audio("a", torch.ones(2, 10)),
    "text-not-str": lambda w: w.add_text("t", 5),
    "tensor-numpy": lambda w: w.add_tensor("t", np.ones(2)),
    "tensor-uint16": lambda w: w.add_tensor("t", torch.ones(2, dtype=torch.uint16)),
    "histogram-raw-lengths": lambda w: w.add_histogram_raw("r", 0, 1, 2, 1, 1, [1.0], [1, 1]),
    "marginchart-two-tags": lambda w: w.add_custom_scalars_marginchart(["a", "b"]),
    "layout-margin-one-tag": lambda w: w.add_custom_scalars({"c": {"t": ["Margin", ["a"]]}}),
    "hparams-not-dict": lambda w: w.add_hparams([("lr", 1)], {}),
    "hparams-list-value": lambda w: w.add_hparams({"lr": [1]}, {}),
    "hparams-0-dim-tensor": lambda w: w.add_hparams({"lr": torch.tensor(0.1)}, {}),
    "hparams-domain-type": lambda w: w.add_hparams({"lr": 0.1}, {}, {"lr": ["a"]}),
    "embedding-1d": lambda w: w.add_embedding(torch.ones(3)),
    "embedding-labels": lambda w: w.add_embedding(torch.ones(3, 2), ["a"]),
}


def _error(call, writer) -> tuple[type, str]:
    with pytest.raises(Exception) as raised:
        call(writer)
    return raised.type, " ".join(str(raised.value).split())


@pytest.mark.parametrize("name", BAD_CALLS)
def test_wrong_input_raises_what_torch_raises(name, tmp_path):
    """A call torch refuses is refused on the caller's thread with the same error."""
    call = BAD_CALLS[name]
    with TorchWriter(tmp_path / "torch") as theirs, SummaryWriter(tmp_path / "ours") as ours:
        assert _error(call, ours) == _error(call, theirs)
        assert ours.dropped == 0


def test_filename_suffix_ends_every_event_file_name_as_torchs_does(tmp_path):
    """Every run's event file ends with ``filename_suffix`` and TensorBoard reads what torch's
    writer leaves with it."""
    for kind, cls in (("torch", TorchWriter), ("ours", SummaryWriter)):
        with cls(tmp_path / kind, filename_suffix=".v2") as writer:
            writer.add_scalar("x", 1.0, 1)
            writer.add_scalars("lr", {"a": 1.0}, 1)
    names = [p.name for p in (tmp_path / "ours").rglob("*tfevents*")]
    assert len(names) == 2 and all(name.endswith(".tbm.v2") for name in names)
    assert events_by_run(tmp_path / "ours") == events_by_run(tmp_path / "torch")
