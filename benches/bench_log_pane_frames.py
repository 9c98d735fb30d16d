"""The loop's CPU per frame of the startup view's log pane during a flood, replayed without a clock.

``bench_startup_ui.py`` measures key latency against a live burst, which on a shared machine swings
with its load. This bench replays the same kind of flood into the real widgets (the startup
panel and the log pane, 200x50, headless) deterministically: each step queues :data:`BATCHES_PER_STEP` tail batches of
:data:`BATCH_LINES` burst lines (a quarter second of 20,000 lines/s; every ``--huge-every`` batches
one 250 KB line, and once the 90 KB line of CR redraws), writes them to the view (the pane's drain,
which during a flood keeps the newest and counts the rest) and renders one frame, as the pane does
during a flood (one write per frame). The heap is frozen first, as the startup view does when a
container's log begins (:func:`console.heap.freeze_new`). Every 4th step also toggles follow twice (the ``f``
the other bench presses). It measures the loop thread's CPU (``time.thread_time``) for the writes
and the frames, so the figures compare code, not machine load; under
``valgrind --tool=callgrind`` (``--steps 20``) the instruction count is the same measure.

Prints: CPU per step (write + frame) mean/p50/p99/max in ms, of which in the frame (compositor),
the rows the log view rendered, and the CPU of the whole replay; ``--json`` ends with one JSON line
(``step_ms_mean``, ``step_ms_p99``, ``frame_ms_mean``, ``write_ms_mean``, ``steps``).

Run: ``.venv/bin/python benches/bench_log_pane_frames.py [--steps 80] [--huge-every 15] [--json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Lines per tail batch (the startup view's ``TAIL_BATCH_LINES``).
BATCH_LINES = 500
#: Tail batches per pane write: 0.25 s (the pane's flood interval) of a 20,000 lines/s burst.
BATCHES_PER_STEP = 10


def burst_line(i: int) -> str:
    """The sandbox's burst line number ``i`` (a vLLM metrics line)."""
    return (f"(APIServer pid=1) INFO 09-30 03:50:{(i // 20000) % 60:02d} [loggers.py:123] Engine 000: Avg prompt "
            f"throughput: {i % 997}.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, "
            f"Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%")


def batches(steps: int, huge_every: int) -> list[list[str]]:
    """``steps`` batches of burst lines, cleaned and masked as the tail's line thread hands them over."""
    from console.render.plain import log_line_text
    from sandbox.vm import _redrawn_bar

    out: list[list[str]] = []
    for step in range(steps * BATCHES_PER_STEP):
        lines = [burst_line(step * BATCH_LINES + i) for i in range(BATCH_LINES)]
        if huge_every and step % huge_every == huge_every - 1:
            lines[BATCH_LINES // 2] = "(APIServer pid=1) INFO 09-30 03:50:00 [config.py:1] huge: " + "{'a': 1, " * 27_000
        if step == steps * BATCHES_PER_STEP // 2:
            lines[0] = _redrawn_bar(90_000)
        out.append([log_line_text(line) for line in lines])
    return out


async def replay(steps: int, huge_every: int) -> dict[str, float]:
    """Run the replay; the figures (ms) by name."""
    from textual.app import App, ComposeResult
    from textual.containers import Horizontal

    from console.heap import freeze_new
    from console.widgets.log_pane import LogPane
    from console.widgets.log_view import LogView
    from console.widgets.startup_panel import StartupPanel

    class Frames(App[None]):
        CSS_PATH = [str(ROOT / "console" / "app.tcss"), str(ROOT / "console" / "screens" / "startup.tcss")]

        def compose(self) -> ComposeResult:
            with Horizontal(id="startup-body"):
                yield StartupPanel(id="startup-panel")
                yield LogPane(5000, id="log-pane")

    todo = batches(steps, huge_every)
    rows = [0]
    original = LogView.render_line

    def counted(view: LogView, y: int):  # type: ignore[no-untyped-def]
        rows[0] += 1
        return original(view, y)

    LogView.render_line = counted  # type: ignore[method-assign]
    app = Frames()
    step_s: list[float] = []
    frame_s: list[float] = []
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        pane = app.query_one(LogPane)
        screen = app.screen
        screen._on_timer_update()
        freeze_new()
        rows[0] = 0
        for step in range(steps):
            start = time.thread_time()
            for lines in todo[step * BATCHES_PER_STEP:(step + 1) * BATCHES_PER_STEP]:
                pane.queue_lines(lines)
            pane._drain()
            if step % 4 == 3:
                pane.toggle_follow()
                pane.toggle_follow()
            wrote = time.thread_time()
            screen._on_timer_update()      # the frame: what the screen's update timer does
            end = time.thread_time()
            step_s.append(end - start)
            frame_s.append(end - wrote)
            await asyncio.sleep(0)
    LogView.render_line = original  # type: ignore[method-assign]
    ordered = sorted(step_s)
    return {"steps": steps, "step_ms_mean": 1000 * sum(step_s) / steps,
            "step_ms_p50": 1000 * ordered[steps // 2], "step_ms_p99": 1000 * ordered[min(steps - 1, int(steps * .99))],
            "step_ms_max": 1000 * ordered[-1], "frame_ms_mean": 1000 * sum(frame_s) / steps,
            "write_ms_mean": 1000 * (sum(step_s) - sum(frame_s)) / steps, "rows_rendered": rows[0],
            "total_ms": 1000 * sum(step_s)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80, help="pane writes, one frame each (80)")
    parser.add_argument("--huge-every", type=int, default=15, help="a 250 KB line every this many batches (15)")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = parser.parse_args()
    f = asyncio.run(replay(args.steps, args.huge_every))
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"machine: {os.cpu_count()} cores, load average {' '.join(load)} (CPU figures: the loop thread's own)")
    print(f"{args.steps} steps of {BATCH_LINES * BATCHES_PER_STEP:,} lines (one write + one frame each, 200x50): loop CPU per step "
          f"mean {f['step_ms_mean']:.2f} ms, p50 {f['step_ms_p50']:.2f}, p99 {f['step_ms_p99']:.2f}, "
          f"max {f['step_ms_max']:.2f}")
    print(f"  of which writing {f['write_ms_mean']:.2f} ms, the frame {f['frame_ms_mean']:.2f} ms; "
          f"log rows rendered {f['rows_rendered']:,}; all steps {f['total_ms']:.0f} ms")
    if args.json:
        print(json.dumps({k: round(v, 3) for k, v in f.items()}))


if __name__ == "__main__":
    main()
