"""What every bench_router.py mode writes beside its figures: the machine it ran on, the table it prints,
the JSON it writes, and the numbers read from a router's /proc entry and /metrics text."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")

__all__ = ["counter_sum", "cpu_s", "gc_pauses", "hist_mean", "machine", "table", "write_json"]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "cpu_model": _cpu_model(),
            "load_avg_1m": round(os.getloadavg()[0], 2), "nice": os.nice(0), "packages": _versions()}


def _versions() -> dict[str, str | None]:
    """What the router process runs on (it shares this environment): its HTTP client, and whether uvicorn
    finds uvloop and httptools."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("aiohttp", "uvicorn", "uvloop", "httptools"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def write_json(out: Path, obj: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(obj, indent=2) + "\n")
    print(f"figures: {out}")


def table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for h in header:
        t.add_column(h, justify="right")
    for r in rows:
        t.add_row(*["-" if v is None else (f"{v:g}" if isinstance(v, float) else str(v)) for v in r])
    Console(width=140).print(t)


def hist_mean(text: str, name: str) -> float | None:
    s = c = None
    for line in text.splitlines():
        if line.startswith(name + "_sum"):
            s = float(line.split()[-1])
        elif line.startswith(name + "_count"):
            c = float(line.split()[-1])
    return s / c if s is not None and c else None


def counter_sum(text: str, name: str) -> float:
    return sum(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(name + "{"))



def gc_pauses(text: str, name: str = "lenpred_route_gc_pause_seconds") -> dict[str, dict[str, Any]]:
    """The router's garbage collections per generation from its /metrics text: how many, their mean and
    total pause (ms), and how many stopped the loop for over 1 ms and over 5 ms."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        if not line.startswith(name) or "{" not in line:
            continue
        key, value = line.rsplit(" ", 1)
        labels = dict(kv.split("=", 1) for kv in key[key.index("{") + 1:-1].split(","))
        g = out.setdefault(labels['generation'].strip('"'), {})
        if key.startswith(name + "_count"):
            g["count"] = int(float(value))
        elif key.startswith(name + "_sum"):
            g["total_ms"] = round(float(value) * 1e3, 2)
        elif key.startswith(name + "_bucket") and labels.get("le") in ('"0.001"', '"0.005"'):
            g["le_" + labels["le"].strip('"')] = int(float(value))
    for g in out.values():
        n = g.get("count", 0)
        g["mean_ms"] = round(g.get("total_ms", 0.0) / n, 3) if n else None
        g["over_1ms"] = n - g.pop("le_0.001", n)
        g["over_5ms"] = n - g.pop("le_0.005", n)
    return dict(sorted(out.items()))
