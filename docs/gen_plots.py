"""Draw the benchmark pages from the measured figures: docs/benchmarks/data.json -> index.md and img/*.png.

    python docs/gen_plots.py            # (re)write docs/benchmarks/index.md and docs/benchmarks/img/*.png
    python docs/gen_plots.py --check    # exit 1 when they are not what data.json gives (CI)

Per suite of data.json it draws two bandwidth roofline-style charts (matplotlib, Agg backend):

- ``<id>_bandwidth.png``: achieved bandwidth of every contender in every case, as a percentage of the
  suite's measured ceiling (a device copy, an in-place ``a += b``), with the ceiling drawn as a line at
  100% and its value on the right-hand axis;
- ``<id>_roofline.png`` (suites whose rows have ``ms`` and ``elements``): time per step against the bytes
  the step must move, with the ceiling as the line ``time = bytes / ceiling``: no implementation can be
  below it, and the distance above it is what is left on the table.

The output is deterministic: fixed sizes, fonts that ship with matplotlib, no dates, sorted inputs; running
it twice writes identical files. Each PNG records the SHA-256 of the suite it was drawn from in a text
chunk (``anyaccel-data``), which ``--check`` compares, so the check does not depend on the matplotlib
version that drew the pixels. The page is checked byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / "benchmarks" / "data.json"
PAGE = HERE / "benchmarks" / "index.md"
IMG = HERE / "benchmarks" / "img"
#: PNG text-chunk key holding the SHA-256 of the suite a chart was drawn from.
HASH_KEY = "anyaccel-data"
COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")

INTRO = """\
# Benchmarks

Measured figures, as published on the guides' pages, with bandwidth roofline-style charts. The optimizers
are memory-bound: a step does a few floating-point operations per byte it moves (Adam reads a parameter,
its gradient and two moments, and writes the parameter and the moments), so the bandwidth it reaches,
against the bandwidth the same machine reaches copying memory (measured in the same run), says how close it
is to the best possible. Every figure here is copied from the page and table named
under its suite; `docs/benchmarks/data.json` holds them and `docs/gen_plots.py` draws this page from it
(do not edit this page by hand). After the charts, tables hold figures that are not bandwidths: the model
ops' training throughput and memory, and their kernels' share of the copy ceiling.
"""

SCHEMA = """\
## Adding measured figures

Add the figures to `docs/benchmarks/data.json` (and to the guide page that publishes them), then run
`python docs/gen_plots.py` and commit the page and the images; CI runs `python docs/gen_plots.py --check`.
The file is one JSON object:

| key | what |
|---|---|
| `schema` | `1` |
| `suites` | list of suites (below), drawn in this order |
| `tables` | list of tables (below): figures that are not bandwidths, printed, not drawn |
| `unpublished` | list of `{"source", "why"}`: benchmarks whose page has no figures yet |

A suite:

| key | what |
|---|---|
| `id` | file-name stem of its charts (`[a-z0-9_]+`) |
| `title`, `environment` | headings: what was compared, on which machine and software |
| `source` | the page, section and table the figures were copied from |
| `command`, `command_note` | the command that measured them; optionally a remark on it (printed in brackets) |
| `ceiling` | `{"what", "value", "unit"}`: the bandwidth ceiling measured in the same run (`unit`: `GB/s` or `TB/s`) |
| `contenders` | `{name: description}`, in the order of the bars |
| `modes` | `{name: description}` of the storage modes the rows use |
| `notes` | list of sentences printed under the table |
| `rows` | one entry per (case, contender), below |

A table: `id` (`[a-z0-9_]+`), `title`, `source`, `command`, `environment` (as a suite's), `columns` (the
header cells), `rows` (lists of cells, strings or numbers, as many as the columns, copied as published) and
optionally `notes`.

A row: `shape` (the case, e.g. `"1e9 in 400"`), `mode`, `contender`, `bytes_per_element` (bytes the step
moves per element in this mode for this contender), and at least one of `pct` (% of the ceiling, as
published) and `bandwidth` (in the ceiling's unit; a row with only one gets the other computed from the
ceiling, for the charts); optionally `ms` (time per step), `elements` (elements
per step: with `ms`, the row is also drawn on the roofline chart) and `vs_torch` (torch's time / this
time). `benchmarks/gpu_optimizers.py --json` writes rows with these names (`shape`, `mode`, `contender`,
`ms`, `pct`, `vs_torch`, `bytes_per_element`); add `elements`. Copy numbers as published; the tables print
`ms` with 3 decimals and `pct` with 1, as the guides do.
"""


def load(path: Path = DATA) -> dict[str, Any]:
    """The data file, checked against the schema.

    Raises:
        ValueError: naming the suite, the row and the problem.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("schema") != 1:
        raise ValueError(f"{path}: 'schema' must be 1")
    for suite in data["suites"]:
        sid = suite.get("id", "?")
        for key in ("id", "title", "source", "command", "environment", "ceiling", "contenders", "modes", "rows"):
            if key not in suite:
                raise ValueError(f"{path}: suite {sid}: missing {key!r}")
        if not sid.replace("_", "").isalnum() or sid.lower() != sid:
            raise ValueError(f"{path}: suite id {sid!r} must match [a-z0-9_]+")
        if suite["ceiling"].get("unit") not in ("GB/s", "TB/s"):
            raise ValueError(f"{path}: suite {sid}: ceiling unit must be GB/s or TB/s")
        for i, row in enumerate(suite["rows"]):
            for key in ("shape", "mode", "contender", "bytes_per_element"):
                if key not in row:
                    raise ValueError(f"{path}: suite {sid} row {i}: missing {key!r}")
            if "pct" not in row and "bandwidth" not in row:
                raise ValueError(f"{path}: suite {sid} row {i}: needs 'pct' or 'bandwidth'")
            if row["contender"] not in suite["contenders"] or row["mode"] not in suite["modes"]:
                raise ValueError(f"{path}: suite {sid} row {i}: contender and mode must be declared in the suite")
    for tab in data.get("tables", []):
        tid = tab.get("id", "?")
        for key in ("id", "title", "source", "command", "environment", "columns", "rows"):
            if key not in tab:
                raise ValueError(f"{path}: table {tid}: missing {key!r}")
        for i, row in enumerate(tab["rows"]):
            if len(row) != len(tab["columns"]):
                raise ValueError(f"{path}: table {tid} row {i}: {len(row)} cells for {len(tab['columns'])} columns")
    return data


def plain_table(tab: dict[str, Any]) -> str:
    """A Markdown section for a table of the data file: its headings and its rows as published."""
    out = [f"## {tab['title']}\n", f"- Source: {tab['source']}.", f"- Measured with `{tab['command']}`.",
           f"- Machine and software: {tab['environment']}.\n",
           "| " + " | ".join(tab["columns"]) + " |", "|" + "---|" * len(tab["columns"])]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in tab["rows"]]
    out.append("")
    out += [f"- {note}" for note in tab.get("notes", [])]
    out.append("")
    return "\n".join(out)


def suite_hash(suite: dict[str, Any]) -> str:
    """SHA-256 of a suite's canonical JSON (what its charts record and ``--check`` compares)."""
    return hashlib.sha256(json.dumps(suite, sort_keys=True).encode()).hexdigest()


def pct_of(row: dict[str, Any], ceiling: float) -> float:
    """The row's % of the ceiling: as published, else its bandwidth over the ceiling."""
    return float(row["pct"]) if "pct" in row else 100.0 * float(row["bandwidth"]) / ceiling


def bandwidth_of(row: dict[str, Any], ceiling: float) -> float:
    """The row's bandwidth in the ceiling's unit: as published, else its % of the ceiling."""
    return float(row["bandwidth"]) if "bandwidth" in row else float(row["pct"]) * ceiling / 100.0


def cases(suite: dict[str, Any]) -> list[tuple[str, str]]:
    """The suite's (shape, mode) cases in the order of their first row."""
    return list(dict.fromkeys((r["shape"], r["mode"]) for r in suite["rows"]))


def _fmt(value: float) -> str:
    return f"{value:g}"


def table(suite: dict[str, Any]) -> str:
    """A Markdown table: one line per case, one column per contender (ms, % of the ceiling, ratio)."""
    ceiling = float(suite["ceiling"]["value"])
    contenders = list(suite["contenders"])
    head = "| shape | mode | " + " | ".join(f"{c}: bytes/el, ms, % ceiling" for c in contenders) + " |"
    lines = [head, "|---|---|" + "---|" * len(contenders)]
    by_key = {(r["shape"], r["mode"], r["contender"]): r for r in suite["rows"]}
    for shape, mode in cases(suite):
        cells = []
        for c in contenders:
            r = by_key.get((shape, mode, c))
            if r is None:
                cells.append("")
                continue
            parts = [str(r["bytes_per_element"])]
            parts.append(f"{r['ms']:.3f} ms" if "ms" in r else "-")
            pct = f"{r['pct']:.1f}%" if "pct" in r else f"{_fmt(r['bandwidth'])} {suite['ceiling']['unit']}"
            if "pct" not in r:
                pct += f" ({pct_of(r, ceiling):.0f}%)"
            parts.append(pct)
            if "vs_torch" in r:
                parts.append(f"x{r['vs_torch']:.2f}")
            cells.append(", ".join(parts))
        lines.append(f"| {shape} | {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def page(data: dict[str, Any]) -> str:
    """The whole of docs/benchmarks/index.md."""
    out = [INTRO]
    for suite in data["suites"]:
        c = suite["ceiling"]
        out.append(f"## {suite['title']}\n")
        out.append(f"- Source: {suite['source']}.")
        note = f" ({suite['command_note']})" if suite.get("command_note") else ""
        out.append(f"- Measured with `{suite['command']}`{note}.")
        out.append(f"- Machine and software: {suite['environment']}.")
        out.append(f"- Ceiling: {_fmt(c['value'])} {c['unit']}, {c['what']}.")
        out.append("- Contenders: " + "; ".join(f"`{k}`: {v}" for k, v in suite["contenders"].items()) + ".")
        out.append("- Modes: " + "; ".join(f"`{k}`: {v}" for k, v in suite["modes"].items()) + ".\n")
        out.append(table(suite) + "\n")
        out.append("Cells: bytes moved per element, time per step, % of the ceiling (or bandwidth), and the "
                   "ratio torch time / this time where published.\n")
        for note in suite.get("notes", []):
            out.append(f"- {note}")
        out.append("")
        out.append(f"![{suite['title']}: % of the ceiling per contender and case](img/{suite['id']}_bandwidth.png)\n")
        if _roofline_rows(suite):
            out.append(f"![{suite['title']}: time per step against bytes moved, with the ceiling]"
                       f"(img/{suite['id']}_roofline.png)\n")
    out += [plain_table(tab) for tab in data.get("tables", [])]
    if data.get("unpublished"):
        out.append("## Not yet published\n")
        for item in data["unpublished"]:
            out.append(f"- {item['source']}: {item['why']}.")
        out.append("")
    out.append(SCHEMA)
    return "\n".join(out)


def _roofline_rows(suite: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in suite["rows"] if "ms" in r and "elements" in r]


def _figure_bandwidth(suite: dict[str, Any]) -> Any:
    import matplotlib.pyplot as plt

    ceiling = float(suite["ceiling"]["value"])
    unit = suite["ceiling"]["unit"]
    contenders = list(suite["contenders"])
    keys = cases(suite)
    by_key = {(r["shape"], r["mode"], r["contender"]): r for r in suite["rows"]}
    width = 0.8 / max(1, len(contenders))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.15 * len(keys) + 2.5), 4.6), dpi=100)
    top = 105.0
    for j, name in enumerate(contenders):
        xs, ys = [], []
        for i, (shape, mode) in enumerate(keys):
            r = by_key.get((shape, mode, name))
            if r is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(pct_of(r, ceiling))
        top = max(top, *ys, 0) if ys else top
        ax.bar(xs, ys, width=width * 0.92, label=name, color=COLORS[j % len(COLORS)], zorder=2)
    ax.axhline(100.0, color="black", linewidth=1.4, linestyle="--", zorder=3)
    ax.text(-0.45, 100.0, f"ceiling: {_fmt(ceiling)} {unit}", va="bottom", ha="left", fontsize=8, zorder=4,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([f"{s}\n{m}" for s, m in keys], fontsize=7)
    ax.set_xlim(-0.5, len(keys) - 0.5)
    ax.set_ylim(0, top * 1.12)
    ax.set_ylabel("% of the measured ceiling", fontsize=8)
    right = ax.secondary_yaxis("right", functions=(lambda p: p * ceiling / 100.0, lambda b: b * 100.0 / ceiling))
    right.set_ylabel(f"achieved {unit}", fontsize=8)
    ax.grid(axis="y", linewidth=0.5, alpha=0.5, zorder=0)
    ax.set_title(suite["title"], fontsize=9)
    ax.legend(fontsize=7, ncol=min(4, len(contenders)), loc="upper center", bbox_to_anchor=(0.5, -0.2),
              frameon=False)
    fig.tight_layout()
    return fig


def _figure_roofline(suite: dict[str, Any]) -> Any:
    import matplotlib.pyplot as plt

    ceiling = float(suite["ceiling"]["value"])
    unit = suite["ceiling"]["unit"]
    per_s = ceiling * (1e12 if unit == "TB/s" else 1e9)  # bytes per second
    rows = _roofline_rows(suite)
    contenders = list(suite["contenders"])
    markers = ("o", "s", "^", "D", "v", "P", "X", "*")
    fig, ax = plt.subplots(figsize=(6.4, 4.6), dpi=100)
    gbytes = [r["bytes_per_element"] * r["elements"] / 1e9 for r in rows]
    lo, hi = min(gbytes) / 1.6, max(gbytes) * 1.6
    ax.plot([lo, hi], [lo * 1e9 / per_s * 1e3, hi * 1e9 / per_s * 1e3], color="black", linestyle="--",
            linewidth=1.4, label=f"ceiling: bytes / {_fmt(ceiling)} {unit}", zorder=3)
    for j, name in enumerate(contenders):
        pts = [(r["bytes_per_element"] * r["elements"] / 1e9, r["ms"]) for r in rows if r["contender"] == name]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=name, color=COLORS[j % len(COLORS)],
                       marker=markers[j % len(markers)], s=28, zorder=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("bytes the step moves (GB): bytes/element x elements", fontsize=8)
    ax.set_ylabel("time per step (ms)", fontsize=8)
    ax.grid(which="both", linewidth=0.5, alpha=0.4)
    ax.set_title(f"{suite['title']}\ntime per step against bytes moved", fontsize=9)
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    fig.tight_layout()
    return fig


def render_png(fig: Any, digest: str) -> bytes:
    """The figure as PNG bytes: no software version or date, the data digest in a text chunk."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None, HASH_KEY: digest})
    plt.close(fig)
    return buf.getvalue()


def png_text(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG (standard library only)."""
    out: dict[str, str] = {}
    pos = 8
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            out[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        pos += 12 + length
    return out


def outputs(data: dict[str, Any]) -> dict[Path, tuple[str, str]]:
    """Every file this script writes: path -> (kind, suite digest or "")."""
    files: dict[Path, tuple[str, str]] = {PAGE: ("page", "")}
    for suite in data["suites"]:
        digest = suite_hash(suite)
        files[IMG / f"{suite['id']}_bandwidth.png"] = ("bandwidth", digest)
        if _roofline_rows(suite):
            files[IMG / f"{suite['id']}_roofline.png"] = ("roofline", digest)
    return files


def generate(data: dict[str, Any]) -> list[Path]:
    """Write the page and the charts; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"font.family": "DejaVu Sans", "svg.hashsalt": "anyaccel", "path.simplify": True})
    IMG.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(page(data), encoding="utf-8")
    written = [PAGE]
    for suite in data["suites"]:
        digest = suite_hash(suite)
        figures = {"bandwidth": _figure_bandwidth}
        if _roofline_rows(suite):
            figures["roofline"] = _figure_roofline
        for kind, draw in figures.items():
            path = IMG / f"{suite['id']}_{kind}.png"
            path.write_bytes(render_png(draw(suite), digest))
            written.append(path)
    return written


def check(data: dict[str, Any]) -> list[str]:
    """Why the committed page and charts are not what ``data`` gives (empty: up to date)."""
    problems = []
    expected = outputs(data)
    if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != page(data):
        problems.append(f"{PAGE}: not generated from {DATA}; run python docs/gen_plots.py")
    for path, (kind, digest) in expected.items():
        if kind == "page":
            continue
        if not path.exists():
            problems.append(f"{path}: missing; run python docs/gen_plots.py")
        elif png_text(path.read_bytes()).get(HASH_KEY) != digest:
            problems.append(f"{path}: drawn from other figures than {DATA}; run python docs/gen_plots.py")
    for path in sorted(IMG.glob("*.png")) if IMG.exists() else []:
        if path not in expected:
            problems.append(f"{path}: no suite draws it any more; delete it")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the outputs are not up to date")
    args = parser.parse_args(argv)
    data = load()
    if args.check:
        problems = check(data)
        for line in problems:
            print(line)
        return 1 if problems else 0
    for path in generate(data):
        print(path.relative_to(HERE.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
