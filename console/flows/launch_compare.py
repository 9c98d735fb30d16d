"""Two recorded launches compared: every difference of their specs and of their figures.

Shared by the compare view (``console/screens/history/compare.py``) and ``tpu-console history
compare``. ``A`` is the baseline, ``B`` the other launch, so deltas read as "what changed since".
Pure functions over :class:`store.records.Launch` and :class:`store.records.BenchmarkRecord`.

A change is called ``better`` or ``worse`` only beyond the figure's noise
(:data:`NOISE_PCT`): a boot time or a tokens/s figure that moved by 5 % or less between two
runs of the same spec is run-to-run variation, and is labelled ``within noise``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from store.records import BenchmarkRecord, Launch, parse_flags

#: Run-to-run noise of each figure family, in percent of A's value: a change within it is
#: neither better nor worse. Counts the engine computes (KV cache tokens, max concurrency) and
#: pass/fail results are deterministic (0 %). Medians of request latency vary more than
#: throughput or boot times (10 % vs 5 %).
NOISE_PCT: Mapping[str, float] = {
    "kv_cache_tokens": 0.0, "max_concurrency": 0.0, "compile_s": 5.0, "engine_init_s": 5.0,
    "time_to_ready_s": 5.0, "output_tokens_per_s": 5.0, "ttft_ms": 10.0, "tpot_ms": 10.0,
    "usd_per_mtok": 5.0, "smoke_ok": 0.0, "smoke_latency_s": 10.0, "tool_call_ok": 0.0,
    "recall": 0.0, "longctx_ttft_s": 10.0, "prefill_tokens_per_s": 5.0,
}


@dataclass(frozen=True)
class FlagChange:
    """One setting that differs: ``change`` is ``added``, ``removed`` or ``changed``; an image is
    ``pinned`` when ``b`` runs by digest the image ``a`` ran by a tag recorded with that digest
    (``unpinned`` the other way round): the same image, not a change of it.

    ``setting`` names it as ``image``, ``image digest``, ``model``, ``--flag``, ``extra args``,
    ``env NAME``, ``volume /container/path``, ``port P``, ``network``, ``privileged``, ``shm size``.
    """

    setting: str
    a: str | None
    b: str | None
    change: str

    def to_json(self) -> dict[str, Any]:
        """``{"setting", "a", "b", "change"}``."""
        return {"setting": self.setting, "a": self.a, "b": self.b, "change": self.change}


@dataclass(frozen=True)
class FigureDelta:
    """One figure of both launches.

    Attributes:
        figure: name with unit (``out tok/s @16 streams``).
        a, b: values, ``None`` when not recorded.
        higher_is_better: ``True``/``False``, or ``None`` when neither direction is better.
        noise_pct: changes up to this percentage of ``a`` are ``within noise`` (:data:`NOISE_PCT`).
    """

    figure: str
    a: float | None
    b: float | None
    higher_is_better: bool | None
    noise_pct: float = 0.0

    @property
    def delta(self) -> float | None:
        """``b - a``, or ``None`` when either is missing."""
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def delta_pct(self) -> float | None:
        """``(b - a) / |a|`` in percent, or ``None`` (a value missing or ``a`` is 0)."""
        delta = self.delta
        return None if delta is None or not self.a else delta / abs(self.a) * 100

    @property
    def verdict(self) -> str:
        """``better``, ``worse``, ``same``, ``within noise`` or ``""`` (no direction or a value missing)."""
        delta = self.delta
        if delta is None:
            return ""
        if delta == 0:
            return "same"
        if self.higher_is_better is None:
            return ""
        pct = self.delta_pct
        if self.noise_pct and pct is not None and abs(pct) <= self.noise_pct:
            return "within noise"
        return "better" if (delta > 0) == self.higher_is_better else "worse"

    def to_json(self) -> dict[str, Any]:
        """``{"figure", "a", "b", "delta", "delta_pct", "noise_pct", "higher_is_better", "verdict"}``."""
        return {"figure": self.figure, "a": self.a, "b": self.b, "delta": self.delta,
                "delta_pct": None if self.delta_pct is None else round(self.delta_pct, 2),
                "noise_pct": self.noise_pct, "higher_is_better": self.higher_is_better, "verdict": self.verdict}


def _text(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return str(value)


def _volume_settings(volumes: Sequence[Any]) -> dict[str, str]:
    """``host:container[:mode]`` mounts keyed by their container path (what the server sees)."""
    out = {}
    for volume in volumes or ():
        parts = str(volume).split(":")
        target = parts[1] if len(parts) >= 2 else parts[0]
        out[f"volume {target}"] = str(volume)
    return out


def _extra_args(extra_args: Sequence[Any], serve_flags: Mapping[str, str]) -> str:
    """The spec's free-form ``extra_args`` as text, or ``""`` when every flag in them is already one of
    the serve arguments' flags with the same value (a swap records ``--bogus-flag 3`` in both: it
    is one setting, compared as ``--bogus-flag``, not twice)."""
    extra = [str(a) for a in extra_args]
    own = parse_flags(["-", *extra])
    words = [a for a in extra if not a.startswith("--")]
    if own and len(words) <= len(own) and all(serve_flags.get(k) == v for k, v in own.items()):
        return ""
    return _text(extra)


def spec_settings(launch: Launch) -> dict[str, str]:
    """Every setting of a launch's container, as ``{setting: value}`` (empty values left out)."""
    spec: Mapping[str, Any] = launch.container_spec or {}
    out = {"image": launch.image or spec.get("image") or "",
           "image digest": launch.image_digest or spec.get("image_digest") or "",
           "model": launch.model or spec.get("model") or ""}
    flags = parse_flags(launch.serve_args)
    out.update({f"--{k}": v for k, v in flags.items()})
    out["extra args"] = _extra_args(spec.get("extra_args") or (), flags)
    out.update({f"env {k}": str(v) for k, v in (spec.get("env") or {}).items()})
    out.update(_volume_settings(spec.get("volumes") or ()))
    out.update({f"port {p}": str(p) for p in spec.get("ports") or ()})
    for key, label in (("network", "network"), ("privileged", "privileged"), ("shm_size", "shm size")):
        out[label] = _text(spec.get(key))
    return {k: v for k, v in out.items() if v != ""}


def spec_diff(a: Launch, b: Launch) -> list[FlagChange]:
    """Every setting that differs from ``a`` to ``b`` (:func:`spec_settings`), in ``a``'s order then
    ``b``'s. Flags are normalized (``--a=b``/``--a b``, ``_``/``-``); secrets are compared masked,
    as the history keeps them."""
    sa, sb = spec_settings(a), spec_settings(b)
    changes = []
    for key in list(sa) + [k for k in sb if k not in sa]:
        va, vb = sa.get(key), sb.get(key)
        if va == vb:
            continue
        change = "added" if va is None else "removed" if vb is None else "changed"
        if key == "image" and change == "changed":
            change = _pin_change(va, vb, sa.get("image digest"), sb.get("image digest"))
        changes.append(FlagChange(key, va, vb, change))
    return changes


def _pin_change(image_a: str | None, image_b: str | None, digest_a: str | None, digest_b: str | None) -> str:
    """``pinned`` when ``image_b`` is the repo digest ``a``'s tag was recorded with (the same image,
    pinned: a relaunch or swap by digest), ``unpinned`` the other way round, else ``changed``."""
    from remote.container.spec import repo_digest

    if repo_digest(image_b) and image_b in (digest_a, digest_b) and digest_a in (None, image_b):
        return "pinned"
    if repo_digest(image_a) and image_a in (digest_a, digest_b) and digest_b in (None, image_a):
        return "unpinned"
    return "changed"


def latest_by_concurrency(benches: Sequence[BenchmarkRecord]) -> dict[int, BenchmarkRecord]:
    """The newest throughput benchmark per concurrency (``benches`` oldest first)."""
    out: dict[int, BenchmarkRecord] = {}
    for b in benches:
        if b.kind == "throughput" and b.concurrency is not None:
            out[b.concurrency] = b
    return out


def _latest(benches: Sequence[BenchmarkRecord], kind: str) -> BenchmarkRecord | None:
    found = [b for b in benches if b.kind == kind]
    return found[-1] if found else None


def _flag(value: Any) -> float | None:
    return None if value is None else 1.0 if value else 0.0


def smoke_figures(bench: BenchmarkRecord | None) -> dict[str, float | None]:
    """``answered`` (1/0), ``latency_s``, ``tool_call_ok`` (1/0) of a smoke run; ``{}`` without one."""
    if bench is None:
        return {}
    r = bench.results or {}
    raw_tool = r.get("tool")
    tool: Mapping[str, Any] = raw_tool if isinstance(raw_tool, Mapping) else {}
    tool_ok = tool.get("passed") if "passed" in tool else (
        bool(tool.get("arguments_ok") and tool.get("final_ok")) if tool else None)
    latency = r.get("latency_s")
    return {"answered": _flag(r.get("ok")), "latency_s": float(latency) if r.get("ok") and latency else None,
            "tool_call_ok": _flag(tool_ok)}


def longctx_figures(bench: BenchmarkRecord | None) -> dict[str, float | None]:
    """``recall`` (passphrases found / probes within the context), ``ttft_s`` (median) and
    ``prefill_tokens_per_s`` (median) of a long-context run; ``{}`` without one. The probe past
    ``max_model_len`` (refused on purpose) is left out."""
    if bench is None:
        return {}
    r = bench.results or {}
    probes = [p for p in r.get("probes") or () if isinstance(p, Mapping) and p.get("status_code") is None]
    if not probes:
        return {"recall": _flag(r.get("found_all")), "ttft_s": None, "prefill_tokens_per_s": None}
    ttfts = [float(p["ttft_s"]) for p in probes if p.get("ttft_s")]
    rates = [float(p["prompt_tokens_per_s"]) for p in probes if p.get("prompt_tokens_per_s")]
    return {"recall": sum(1 for p in probes if p.get("found")) / len(probes),
            "ttft_s": statistics.median(ttfts) if ttfts else None,
            "prefill_tokens_per_s": statistics.median(rates) if rates else None}


def peak_hbm_gib(launch: Launch) -> float | None:
    """Highest HBM used on any chip at any recorded stage (GiB), or ``None``."""
    used = [u for stage in launch.hbm for u in (stage.get("used_gib") or []) if isinstance(u, (int, float))]
    return max(used) if used else None


def figure_diff(a: Launch, b: Launch, benches_a: Sequence[BenchmarkRecord],
                benches_b: Sequence[BenchmarkRecord]) -> list[FigureDelta]:
    """Startup figures, then per concurrency the throughput figures, then the newest smoke and
    long-context results, of ``a`` and ``b`` (benchmarks oldest first). Rows where neither
    launch has a value are left out, except the startup figures."""
    n = NOISE_PCT
    rows = [
        FigureDelta("peak HBM used (GiB/chip)", peak_hbm_gib(a), peak_hbm_gib(b), None),
        FigureDelta("KV cache (tokens)", a.kv_cache_tokens, b.kv_cache_tokens, True, n["kv_cache_tokens"]),
        FigureDelta("max concurrency", a.max_concurrency, b.max_concurrency, True, n["max_concurrency"]),
        FigureDelta("max-model-len (tokens)", a.max_model_len, b.max_model_len, None),
        FigureDelta("XLA compile (s)", a.compile_seconds, b.compile_seconds, False, n["compile_s"]),
        FigureDelta("engine init (s)", a.engine_init_seconds, b.engine_init_seconds, False, n["engine_init_s"]),
        FigureDelta("time to ready (s)", a.time_to_ready_s, b.time_to_ready_s, False, n["time_to_ready_s"]),
    ]
    by_a, by_b = latest_by_concurrency(benches_a), latest_by_concurrency(benches_b)
    for level in sorted(set(by_a) | set(by_b)):
        ra, rb = by_a.get(level), by_b.get(level)
        for attr, label, higher, noise in (
                ("output_tokens_per_s", "out tok/s", True, n["output_tokens_per_s"]),
                ("ttft_median_ms", "TTFT ms", False, n["ttft_ms"]),
                ("tpot_median_ms", "TPOT ms", False, n["tpot_ms"]),
                ("usd_per_mtok", "$/Mtok", False, n["usd_per_mtok"])):
            va = getattr(ra, attr) if ra else None
            vb = getattr(rb, attr) if rb else None
            if va is not None or vb is not None:
                rows.append(FigureDelta(f"{label} @{level} stream{'' if level == 1 else 's'}", va, vb, higher, noise))
    for kind, figures, labels in (
            ("smoke", smoke_figures, (("answered", "smoke: answered (1 yes / 0 no)", True, n["smoke_ok"]),
                                      ("latency_s", "smoke: latency (s)", False, n["smoke_latency_s"]),
                                      ("tool_call_ok", "smoke: tool call ok (1/0)", True, n["tool_call_ok"]))),
            ("longctx", longctx_figures, (("recall", "long context: needle recall (0-1)", True, n["recall"]),
                                          ("ttft_s", "long context: TTFT median (s)", False, n["longctx_ttft_s"]),
                                          ("prefill_tokens_per_s", "long context: prefill tok/s", True,
                                           n["prefill_tokens_per_s"])))):
        fa, fb = figures(_latest(benches_a, kind)), figures(_latest(benches_b, kind))
        for key, label, higher, noise in labels:
            va, vb = fa.get(key), fb.get(key)
            if va is not None or vb is not None:
                rows.append(FigureDelta(label, va, vb, higher, noise))
    return rows


def compare_json(a: Launch, b: Launch, benches_a: Sequence[BenchmarkRecord],
                 benches_b: Sequence[BenchmarkRecord]) -> dict[str, Any]:
    """``{"a": id, "b": id, "spec": [FlagChange...], "figures": [FigureDelta...], "noise_pct": {...}}``."""
    return {"a": a.id, "b": b.id, "spec": [c.to_json() for c in spec_diff(a, b)],
            "figures": [r.to_json() for r in figure_diff(a, b, benches_a, benches_b)],
            "noise_pct": dict(NOISE_PCT)}


__all__ = [
    "NOISE_PCT", "FigureDelta", "FlagChange", "compare_json", "figure_diff", "latest_by_concurrency",
    "longctx_figures", "peak_hbm_gib", "smoke_figures", "spec_diff", "spec_settings",
]
