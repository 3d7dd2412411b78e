"""The Ranks view in a real Chromium inside a real `tensorboard --logdir`: a straggler flagged and
clicked through to its lane, and a hang named while the (synthetic, live-written) job runs."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from plugin_helpers import (
    RanksTab,
    rank_windows_server,
    small_job,
    start_tensorboard,
    stop,
)
from rank_jobs import write_recorded_job
from step_time_jobs import median_of, write_step_quantiles

from tb_monitor.sinks.writer import AsyncWriter
from tb_monitor.testing import (
    rank_heartbeat_scalars,
    rank_window_scalars,
)

#: A live hang is named within 30 s of wall-clock time: beside no other timed test.
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timed]

#: The issue's acceptance: the rank a hang waits for is named within this long.
NAMED_WITHIN_S = 30.0


@pytest.fixture(scope="module")
def slow_rank_server(tmp_path_factory):
    """A 2 nodes x 2 workers job (timeline records) whose rank 1 computes 1.5x longer."""
    with rank_windows_server(tmp_path_factory.mktemp("ranks-browser"), 4, 0.1, [1]) as server:
        yield server


def test_ranks_view_flags_rank_1_and_clicks_through_to_its_lane(browser, slow_rank_server):
    """Rank 1 is the only straggler listed; clicking it shows the Timeline on rank 1's lane."""
    tab = RanksTab(browser, slow_rank_server.url)
    try:
        stragglers = tab.frame.locator(".tl-stragglers .tl-rank-link")
        stragglers.first.wait_for(timeout=20_000)
        assert [t.split(" ×")[0] for t in stragglers.all_inner_texts()] == ["rank 1"]
        assert "×1.4" in stragglers.first.inner_text() or "×1.5" in stragglers.first.inner_text()
        summary = tab.frame.locator(".tl-ranks-summary").inner_text()
        assert summary.startswith("4 ranks")
        # The heatmap drew one image of ranks x buckets and answers hovering with text.
        shape = tab.frame.evaluate(
            "() => [window.tbRanks.data.ranks.length, window.tbRanks.data.bins]"
        )
        assert shape == [4, 36]
        stragglers.first.click()
        tab.frame.wait_for_selector(".tl-ranks[hidden]", state="attached", timeout=5_000)
        focused = tab.frame.locator(".tl-row.tl-row-focus")
        focused.wait_for(timeout=5_000)
        assert focused.inner_text() == "rank 1"
        assert tab.frame.locator(".tl-plot").is_visible()
        # Back to the Ranks view: a click on rank 2's row of the heatmap goes to rank 2's lane.
        tab.frame.locator("button.tl-view-toggle").click()
        tab.frame.wait_for_selector(".tl-ranks:not([hidden])", timeout=5_000)
        spot = tab.frame.evaluate(
            "() => { const v = window.tbRanks; v.drawNow();"
            " return {x: v.w - 40, y: 22 + 2 * v.rowH() + v.rowH() / 2 - v.scroll.scrollTop}; }"
        )
        box = tab.frame.locator(".tl-ranks-scroll canvas").bounding_box()
        tab.page.mouse.move(box["x"] + spot["x"], box["y"] + spot["y"])
        tip = tab.frame.locator(".tl-ranks-tooltip")
        tip.wait_for(timeout=5_000)
        assert tip.inner_text().startswith("rank 2")
        tab.page.mouse.click(box["x"] + spot["x"], box["y"] + spot["y"])
        tab.frame.locator(".tl-row.tl-row-focus", has_text="rank 2").wait_for(timeout=5_000)
    finally:
        tab.close()


class LiveJob(threading.Thread):
    """Four ranks in lockstep, one 10-s window (and heartbeat) written every ``tick_s`` of real
    time; from window ``hang_at`` on rank 3 never enters the next collective and the others wait
    inside it, as rank_health's heartbeats would say. With ``ddp``, no collective passes
    through Python (entered 0 everywhere) and the stalled ranks report torch's Flight Recorder,
    rank 3 one collective behind."""

    def __init__(
        self,
        logdir: str,
        run_id: str,
        start: float,
        hang_at: int,
        tick_s: float = 0.5,
        ddp: bool = False,
    ):
        super().__init__(daemon=True)
        self.ddp = ddp
        self.writers = [AsyncWriter(f"{logdir}/{run_id}/rank-{r}") for r in range(4)]
        self.start_t, self.hang_at, self.tick_s = start, hang_at, tick_s
        self.hung_at: float | None = None  # time.monotonic() when rank 3 hung
        self.stop = threading.Event()

    def run(self) -> None:
        window = 0
        while not self.stop.is_set() and window < 200:
            window += 1
            now = self.start_t + 10 * window
            hung = window >= self.hang_at
            if hung and self.hung_at is None:
                self.hung_at = time.monotonic()
            since = 10.0 * (window - self.hang_at + 1) if hung else 0.05
            for r, writer in enumerate(self.writers):
                if not hung:
                    writer.add_scalars(rank_window_scalars(0.1, 0.01, 90), wall_time=now)
                entered = 90 * self.hang_at + (0 if r == 3 else 1) if hung else 90 * window
                beat = rank_heartbeat_scalars(
                    steps=90 * min(window, self.hang_at),
                    entered=0 if self.ddp else entered,
                    left=0 if self.ddp else 90 * min(window, self.hang_at),
                    in_collective_s=0.0 if r == 3 or not hung or self.ddp else since,
                    since_step_s=since,
                    fr_seq=entered if self.ddp and hung else None,
                )
                writer.add_scalars(beat, wall_time=now + 1)
                writer.flush()
            self.stop.wait(self.tick_s)
        for writer in self.writers:
            writer.close()


@pytest.mark.parametrize("ddp", [False, True], ids=["python collectives", "ddp"])
def test_a_hang_is_named_within_30_s_while_the_job_runs(browser, tmp_path, ddp):
    """Rank 3 hangs before a collective while the job is live: the Ranks view names it as the
    rank the job waits for within 30 s of the hang, with no reload (the synthetic job's clock
    runs 20x, so the 30-s stall floor passes in 1.5 s: what is timed is TensorBoard's reload,
    the plugin's refresh and the view's polling); in a DDP job, from the Flight Recorder, which
    its tooltip cites."""
    job = small_job(tmp_path / "logs", nodes=2, workers_per_node=2, restarts=0)
    live = LiveJob(job.logdir, job.run_id, job.end, hang_at=4, ddp=ddp)
    live.writers[0].add_scalars(rank_window_scalars(0.1, 0.01, 90), wall_time=job.end)
    live.writers[0].flush()
    server = start_tensorboard(job.logdir, tmp_path, "--reload_interval=1")
    try:
        tab = RanksTab(browser, server.url)
        try:
            live.start()
            waited = tab.frame.locator(".tl-stalled [data-waited-for='true'] .tl-rank-link")
            waited.wait_for(timeout=(NAMED_WITHIN_S + 20) * 1000)
            assert live.hung_at is not None
            named_after = time.monotonic() - live.hung_at
            assert named_after <= NAMED_WITHIN_S, f"named {named_after:.1f} s after the hang"
            assert waited.inner_text().startswith("rank 3 · the job waits for it")
            recorder = "torch's Flight Recorder has it at collective 360"
            assert (recorder in (waited.get_attribute("title") or "")) is ddp
            assert live.is_alive(), "the job must still be running"
            others = tab.frame.locator(".tl-stalled [data-waited-for='false']").count()
            assert others == 3
        finally:
            tab.close()
    finally:
        live.stop.set()
        live.join(10)
        stop(server)


@pytest.fixture(scope="module")
def recorded_server(tmp_path_factory):
    """A job written as the recorder writes it (windows logged late, a short window at each
    attempt's end, restarts straight after), long enough that the view merges windows."""
    root = tmp_path_factory.mktemp("ranks-recorded")
    job = small_job(root / "logs", nodes=2, workers_per_node=2)
    write_recorded_job(
        job.logdir,
        10.0,
        restart_windows=0,
        windows_per_attempt=300,
        run_id=job.run_id,
        start=job.start,
    )
    server = start_tensorboard(job.logdir, root, "--reload_interval=1")
    yield server
    stop(server)


def test_the_heatmap_has_no_empty_column_between_windows(browser, recorded_server):
    """Every column of the drawn image between the first and the last holding data holds data
    (no white gap hiding a stall), and each column is a whole number of 10-s windows."""
    tab = RanksTab(browser, recorded_server.url)
    try:
        # The picture of a finished read: one drawn while the first read goes on may lack
        # the windows still to come.
        tab.frame.wait_for_function(
            "() => { const d = window.tbRanks && window.tbRanks.data;"
            " return d && d.image && !d.loading; }",
            timeout=30_000,
        )
        drawn = tab.frame.evaluate(
            """() => {
              const d = window.tbRanks.data, img = d.image;
              const px = img.getContext("2d").getImageData(0, 0, img.width, img.height).data;
              const filled = [];
              for (let x = 0; x < img.width; x++) {
                let any = false;
                for (let y = 0; y < img.height; y++) any ||= px[(y * img.width + x) * 4 + 3] > 0;
                filled.push(any);
              }
              return {filled, window_s: d.window_s, bin_s: d.bin_s, per_bin: d.per_bin};
            }"""
        )
        assert drawn["window_s"] == 10.0 and drawn["per_bin"] > 1
        assert drawn["bin_s"] == drawn["per_bin"] * drawn["window_s"]
        filled = drawn["filled"]
        first, last = filled.index(True), len(filled) - 1 - filled[::-1].index(True)
        assert all(filled[first : last + 1]), [i for i, f in enumerate(filled) if not f]
    finally:
        tab.close()


@pytest.fixture(scope="module")
def step_times_server(tmp_path_factory):
    """A 2 nodes x 2 workers job with a failure and a restart whose 4 ranks record their step
    times' median and p95 (each rank its own, rank 2 a long tail)."""
    root = tmp_path_factory.mktemp("ranks-steps")
    job = small_job(root / "logs", nodes=2, workers_per_node=2)
    write_step_quantiles(job.logdir, 4, 120, start=job.start, run_id=job.run_id)
    server = start_tensorboard(job.logdir, root, "--reload_interval=1")
    yield server
    stop(server)


# In the page: the step-time canvas' colour at CSS pixel (x, y), as [r, g, b].
_PIXEL_JS = """([x, y]) => {
  const c = window.tbRanks.steps.canvas, dpr = window.devicePixelRatio || 1;
  return Array.from(c.getContext("2d").getImageData(Math.round(x * dpr), Math.round(y * dpr), 1, 1).data.slice(0, 3));
}"""


def _rgb(hex_color: str) -> list[int]:
    return [int(hex_color.strip().lstrip("#")[i : i + 2], 16) for i in (0, 2, 4)]


def _near(pixel, color, least=0.4, background=(255, 255, 255)) -> bool:
    """Whether ``pixel`` is ``color`` drawn over the light theme's background, at least
    ``least`` covered (a line's edge is anti-aliased, a band translucent)."""
    pixel, color, bg = (np.array(v, dtype=float) for v in (pixel, color, background))
    cover = float(np.dot(bg - pixel, bg - color) / max(1.0, np.dot(bg - color, bg - color)))
    return cover >= least and float(np.abs(bg + cover * (color - bg) - pixel).max()) <= 30


def _steps_drawn(tab) -> dict:
    return tab.frame.evaluate(
        """() => { const v = window.tbRanks; v.drawNow();
          return {...v.steps.drawn, accent: v.tl.colors.accent, height: v.steps.canvas.clientHeight,
                  markers: v.data.markers.map((m) => ({...m, x: v.time.x(m.t)}))}; }"""
    )


def test_step_time_curves_are_drawn_for_every_rank_with_the_attempts_marked(
    browser, step_times_server
):
    """Under the heatmap, on its time axis: a step-time curve for every rank, and the job's start,
    failure and restart as vertical lines in their colours at their times."""
    tab = RanksTab(browser, step_times_server.url)
    try:
        tab.frame.wait_for_function(
            "() => window.tbRanks?.steps?.drawn?.ranks.length === 4", timeout=20_000
        )
        drawn = _steps_drawn(tab)
        assert drawn["ranks"] == [0, 1, 2, 3]
        assert {m["kind"] for m in drawn["markers"]} == {"rendezvous", "failure", "restart"}
        bottom = drawn["height"] - 3  # under the curves (0 s is higher): only markers there
        for marker in drawn["markers"]:
            around = [
                tab.frame.evaluate(_PIXEL_JS, [marker["x"] + dx, bottom - dy])
                for dx in (-1, 0, 1)
                for dy in range(4)
            ]
            assert any(_near(p, _rgb(marker["color"])) for p in around), (marker, around)
        caption = tab.frame.locator(".tl-steps-caption").inner_text()
        assert caption.startswith("Step time per rank: grey each rank's median")
    finally:
        tab.close()


def test_hovering_a_ranks_row_draws_its_own_step_times(browser, step_times_server):
    """Hovering each rank's heatmap row draws that rank's median in the accent colour at its
    recorded value, and the tooltip of its curve names it with its median and p95."""
    tab = RanksTab(browser, step_times_server.url)
    try:
        tab.frame.wait_for_function(
            "() => window.tbRanks?.steps?.drawn?.ranks.length === 4", timeout=20_000
        )
        heat = tab.frame.locator(".tl-ranks-scroll canvas").bounding_box()
        steps = tab.frame.locator(".tl-steps canvas").bounding_box()
        for rank in range(4):
            row_y = tab.frame.evaluate(
                f"() => 22 + {rank} * window.tbRanks.rowH() + window.tbRanks.rowH() / 2"
            )
            tab.page.mouse.move(heat["x"] + heat["width"] - 300, heat["y"] + row_y)
            tab.frame.wait_for_function(
                f"() => window.tbRanks.steps.drawn.highlighted === {rank}", timeout=5_000
            )
            drawn = _steps_drawn(tab)
            where = tab.frame.evaluate(
                f"""() => {{ const s = window.tbRanks.steps, b = Math.floor(s.curves.bins / 2);
                  return {{bin: b, x: s.x(b), y: s.y(s.curves.p50[{rank}][b]),
                           value: s.curves.p50[{rank}][b]}}; }}"""
            )
            assert where["value"] == pytest.approx(median_of(rank, where["bin"]), rel=1e-5)
            pixel = tab.frame.evaluate(_PIXEL_JS, [where["x"], where["y"]])
            assert _near(pixel, _rgb(drawn["accent"])), (rank, pixel, drawn["accent"])
        # The long-tailed rank's curve, hovered in the step-time plot itself.
        tab.page.mouse.move(steps["x"] + where["x"], steps["y"] + where["y"])
        tip = tab.frame.locator(".tl-ranks-tooltip")
        tip.wait_for(timeout=5_000)
        assert tip.inner_text().startswith("rank 3")
        assert "step median" in tip.inner_text() and "p95" in tip.inner_text()
    finally:
        tab.close()


def test_a_rank_starved_of_cpu_is_listed_with_its_reason(browser, slow_rank_server):
    """A straggler flagged for CPU (its compute may read normal) shows its reason in the list."""
    tab = RanksTab(browser, slow_rank_server.url)
    reason = "starved of CPU: 88% of its time waiting for a CPU (the median rank 20%)"
    try:
        tab.frame.locator(".tl-stragglers .tl-rank-link").first.wait_for(timeout=20_000)
        listed = tab.frame.evaluate(
            """async (reason) => {
              const v = window.tbRanks, p = await (await fetch("./ranks?width=1000")).json();
              const starved = {...p.stragglers[0], cause: "cpu", reason, starved_over: 5};
              v.load({...p, stragglers: [starved]});
              return document.querySelector(".tl-stragglers .tl-rank-link").textContent;
            }""",
            reason,
        )
        assert listed.startswith("rank 1 ×") and listed.endswith(f" · {reason}")
    finally:
        tab.close()


def test_past_128_ranks_the_medians_are_one_band(browser, step_times_server):
    """With more ranks than lines can tell apart (the route's 4 ranks repeated to 200), every
    rank's median is one translucent band from the fastest rank's to the slowest's."""
    tab = RanksTab(browser, step_times_server.url)
    try:
        tab.frame.wait_for_function(
            "() => window.tbRanks?.steps?.drawn?.ranks.length === 4", timeout=20_000
        )
        drawn = tab.frame.evaluate(
            """async () => {
              const v = window.tbRanks, p = await (await fetch("./ranks?width=1000")).json();
              const times = (list) => Array.from({length: 50}, () => list).flat();
              const s = p.step_times;
              const big = {...p, ranks: times(p.ranks).map((_, i) => i), runs: times(p.runs),
                cells: times([p.cells]).join(""), scores: [], stragglers: [],
                step_times: {...s, p50: times(s.p50), p95: times(s.p95)}};
              v.load(big); v.drawNow();
              const st = v.steps, b = Math.floor(st.curves.bins / 2);
              return {...st.drawn, muted: v.tl.colors.muted, x: st.x(b),
                      y: (st.y(st.curves.p50[0][b]) * 3 + st.y(st.curves.p50[1][b])) / 4};
            }"""
        )
        assert drawn["band"] is True and drawn["ranks"] == []
        pixel = tab.frame.evaluate(_PIXEL_JS, [drawn["x"], drawn["y"]])
        assert _near(pixel, _rgb(drawn["muted"]), least=0.15), pixel
    finally:
        tab.close()
