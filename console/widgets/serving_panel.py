"""Live serving figures from vLLM's ``/metrics`` after ready: queue, KV cache, tok/s, latencies.

A data-parallel server's KV cache usage is the mean over its engines, the fullest one beside it;
a size the server does not state (only blocks and block size) is shown as derived.

Fed :class:`~remote.vllm_metrics.ServingFigures` every few seconds by the startup view; keeps
the last :data:`HISTORY` tok/s and queue figures for its sparklines. Beside the server's KV cache
size it shows the startup log's, with a note when the two disagree.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Sparkline, Static

from console.widgets.hbm_bars import bar
from console.widgets.in_place import update_in_place
from remote.vllm_metrics import ServingFigures

#: Samples the sparklines show (at the startup view's 3 s sampling, the last 3 minutes).
HISTORY = 60


def _num(value: float | None, fmt: str = ",.0f") -> str:
    return "-" if value is None else format(value, fmt)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f} ms"


def figures_text(f: ServingFigures, log_kv_tokens: int | None) -> Text:
    """The figures as lines of text (plain values from the server, shown literally)."""
    kv = Text.assemble("KV cache  ", bar(f.kv_cache_usage_perc or 0.0, 100.0),
                       f" {_num(f.kv_cache_usage_perc, '.1f')}%")
    if f.engines > 1:
        kv.append(f" (mean of {f.engines} engines, max {_num(f.kv_cache_usage_max_perc, '.1f')}%)")
    if f.kv_cache_size_tokens is not None:
        kv.append(f" of {f.kv_cache_size_tokens:,} tokens")
    elif f.kv_cache_derived_tokens is not None:
        kv.append(f" of ~{f.kv_cache_derived_tokens:,} tokens (derived: blocks x block size)", style="dim")
    lines = [
        Text(f"requests  {_num(f.running)} running · {_num(f.waiting)} waiting"
             + (f" · {f.preemptions:,.0f} preempted" if f.preemptions else "")),
        kv,
        Text(f"output    {_num(f.generation_tokens_per_s, ',.1f')} tok/s"
             + ("" if f.prefix_cache_hit_rate is None else f" · prefix hits {100 * f.prefix_cache_hit_rate:.1f}%")),
        Text(f"TTFT      p50 {_ms(f.ttft_p50_s)} · p90 {_ms(f.ttft_p90_s)}  (last {f.window_s:.0f} s)"),
        Text(f"ITL       p50 {_ms(f.itl_p50_s)} · p90 {_ms(f.itl_p90_s)}"),
    ]
    if f.kv_cache_size_tokens is not None and log_kv_tokens is not None and f.kv_cache_size_tokens != log_kv_tokens:
        lines.append(Text(f"note: the server reports {f.kv_cache_size_tokens:,} KV cache tokens, the startup "
                          f"log said {log_kv_tokens:,}", style="yellow"))
    return Text("\n").join(lines)


class ServingPanel(Vertical):
    """The ``Serving (/metrics)`` section of the startup view; hidden until the first sample."""

    DEFAULT_CSS = """
    ServingPanel { height: auto; display: none; }
    ServingPanel Sparkline { height: 2; margin: 0 0 0 10; }
    ServingPanel .spark-label { color: $text-muted; }
    """

    def __init__(self, *, id: str | None = None, history: int = HISTORY) -> None:
        super().__init__(id=id)
        self.tokens_per_s: deque[float] = deque(maxlen=history)
        self.queue: deque[float] = deque(maxlen=history)
        self.problem: str | None = None

    def compose(self) -> ComposeResult:
        yield Label("Serving (/metrics)", classes="panel-title")
        yield Static("", id="serving-figures")
        yield Label("tok/s", classes="spark-label")
        yield Sparkline([], id="serving-tok-s")
        yield Label("queue (waiting)", classes="spark-label")
        yield Sparkline([], id="serving-queue")

    def show(self, figures: ServingFigures, log_kv_tokens: int | None) -> None:
        """Add one sample's figures (``log_kv_tokens``: the startup log's KV cache size, if known)."""
        self.display = True
        self.problem = None
        if figures.generation_tokens_per_s is not None:
            self.tokens_per_s.append(figures.generation_tokens_per_s)
        if figures.waiting is not None:
            self.queue.append(figures.waiting)
        update_in_place(self.query_one("#serving-figures", Static), figures_text(figures, log_kv_tokens))
        self.query_one("#serving-tok-s", Sparkline).data = sparkline_data(self.tokens_per_s)
        self.query_one("#serving-queue", Sparkline).data = sparkline_data(self.queue)

    def show_problem(self, sentence: str) -> None:
        """``/metrics`` could not be read: say so under the last figures."""
        self.display = True
        self.problem = sentence
        update_in_place(self.query_one("#serving-figures", Static), Text(sentence, style="yellow"))


def sparkline_data(values: Iterable[float]) -> list[float]:
    """``values`` as a sparkline shows them: rounded to the panel's one decimal and anchored at
    zero (Textual scales a sparkline between its data's min and max, so 0.00 and 0.03 tok/s
    would draw as empty and full bars while the figure says "0.0 tok/s")."""
    rounded = [round(float(v), 1) for v in values]
    return [0.0, *rounded] if rounded else []
