"""Draw docs/dashboard.png: the Grafana dashboard's panels, from real query results.

Not a Grafana screenshot. Each panel of deploy/grafana/soniq-sidecar-dashboard.json is drawn
in the dashboard's own grid layout from what its PromQL queries returned from a real
Prometheus scraping a real sidecar, as recorded by the integration test:

    SONIQ_DASHBOARD_LOAD_SECONDS=120 SONIQ_DASHBOARD_DATA=/tmp/dash.json \\
        go test -race -run TestPrometheusScrapesTheSidecar ./integration/
    python scripts/render-dashboard.py deploy/grafana/soniq-sidecar-dashboard.json /tmp/dash.json docs/dashboard.png

Needs matplotlib (bench/chart-requirements.txt pins it).
"""

import json
import math
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

GRID_COLUMNS = 24
ROW_HEIGHT_IN = 0.42  # one Grafana grid row, in inches


def legend(fmt, labels):
    """Grafana's legendFormat: {{label}} replaced by the series' label value."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip() or "value"


def points(series, start):
    xs, ys = [], []
    for ts, v in series.get("values") or []:
        y = float(v)
        if math.isnan(y) or math.isinf(y):
            continue
        xs.append(float(ts) - start)
        ys.append(y)
    return xs, ys


def unit_label(unit):
    return {"s": "seconds", "ops": "per second"}.get(unit, "")


def main():
    dash_path, data_path, out_path = sys.argv[1:4]
    with open(dash_path) as f:
        dash = json.load(f)
    with open(data_path) as f:
        data = json.load(f)
    start = float(data["from"])
    span = float(data["to"]) + 1 - start  # the range queries end a second after "to"
    by_panel = {}
    for t in data["targets"]:
        by_panel.setdefault(t["panel"], []).append(t)

    panels = dash["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    fig = plt.figure(figsize=(16, rows * ROW_HEIGHT_IN + 1.0))
    top_margin = 1.0 / (rows * ROW_HEIGHT_IN + 1.0)
    for p in panels:
        g = p["gridPos"]
        pad_x, pad_y = 0.012, 0.012
        left = g["x"] / GRID_COLUMNS + pad_x + 0.02
        width = g["w"] / GRID_COLUMNS - 2 * pad_x - 0.02
        height = (g["h"] / rows) * (1 - top_margin) - 2 * pad_y - 0.012
        bottom = 1 - top_margin - (g["y"] + g["h"]) / rows * (1 - top_margin) + pad_y + 0.012
        ax = fig.add_axes([left, bottom, width, height])
        ax.set_title(p["title"], fontsize=9, loc="left")
        targets = by_panel.get(p["title"], [])
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        if p["type"] == "stat":
            last = None
            for t in targets:
                for s in t["series"]:
                    _, ys = points(s, start)
                    if ys:
                        last = ys[-1]
            ax.axis("off")
            text = "no data" if last is None else f"{last:g}"
            ax.text(0.5, 0.35, text, ha="center", va="center", fontsize=22, color="#2a7ab0")
            continue
        drawn = 0
        for t in targets:
            for s in t["series"]:
                xs, ys = points(s, start)
                if xs:
                    # A series of a few samples (a NACK scraped once) gets markers, or it would not show.
                    marker = "o" if len(xs) < 5 else None
                    ax.plot(xs, ys, linewidth=1, marker=marker, markersize=4, label=legend(t["legend"], s.get("metric", {})))
                    drawn += 1
        ax.set_xlim(0, span)
        ax.tick_params(labelsize=7)
        ax.set_ylabel(unit_label(unit), fontsize=7)
        ax.set_xlabel("seconds into the run", fontsize=7)
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=6, loc="upper left", ncol=2, framealpha=0.6)
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center")
    fig.suptitle(
        "soniq-sidecar dashboard panels, drawn with matplotlib from the dashboard's PromQL queries "
        "against a real Prometheus scraping a real sidecar (not a Grafana screenshot)",
        fontsize=10,
    )
    fig.savefig(out_path, dpi=90)


if __name__ == "__main__":
    main()
