"""Draw docs/benchmarks.png from the JSON embedded in docs/benchmarks.md.

    python bench/chart.py docs/benchmarks.md docs/benchmarks.png

Needs matplotlib (bench/run.sh installs bench/chart-requirements.txt into a
cached virtualenv).
"""

import json
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

GREY, BLUE, GREEN, ORANGE = "#9e9e9e", "#1f77b4", "#2ca02c", "#ff7f0e"


def load(md_path):
    text = open(md_path, encoding="utf-8").read()
    m = re.search(r"```json\n(.*?)\n```", text, re.S)
    if not m:
        sys.exit(f"{md_path}: no ```json block with the raw results")
    return json.loads(m.group(1))


def colour(v):
    if v.get("kind") == "soniq":
        return GREY
    if v.get("kind") == "ceiling":
        return GREEN
    if v.get("kind") == "alone":
        return "#9467bd"
    return BLUE if v.get("sdk") == "python" else ORANGE


def short(v):
    if v.get("kind") == "soniq":
        label = "Soniq 0.1.0\nworker"
    elif v.get("kind") == "ceiling":
        label = f"DB ceiling\nbatch {v.get('claim_batch')}"
    elif v.get("kind") == "alone":
        label = f"{v['sdk'].capitalize()} SDK\nalone"
    else:
        label = f"sidecar\n{v['sdk'].capitalize()} {v['transport']}"
    if v.get("without_claim_index"):
        label += "\nno index"
    if v.get("claim_ahead_0"):
        label += "\nclaim_ahead 0"
    return label


def measured(data, section):
    """The rows of a section that were measured (none when it was not run)."""
    return [r for r in data.get(section) or [] if not r.get("status")]


def throughput(ax, data):
    rows = measured(data, "throughput")
    soniq = next((t["median_jobs_per_s"] for t in rows if t["key"] == "soniq"), None)
    xs = range(len(rows))
    vals = [t["median_jobs_per_s"] for t in rows]
    bars = ax.bar(xs, vals, color=[colour(t) for t in rows],
                  hatch=["//" if t.get("without_claim_index") else "" for t in rows], edgecolor="white")
    for bar, t in zip(bars, rows):
        runs = [r["jobs_per_s"] for r in t["runs"] if not r.get("error")]
        x = bar.get_x() + bar.get_width() / 2
        ax.plot([x] * len(runs), runs, "k.", markersize=3)
        label = f"{t['median_jobs_per_s']:,.0f}"
        if soniq and t["key"] != "soniq":
            label += f"\n{t['median_jobs_per_s'] / soniq:.1f}×"
        ax.annotate(label, (x, bar.get_height()), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(xs), [short(t) for t in rows], fontsize=6.5)
    ax.set_ylabel("jobs/s (median; dots: runs)")
    missing = [t["label"] for t in data.get("throughput") or [] if t.get("status")]
    title = f"1–2. Throughput, {data['params']['jobs_per_run']:,} no-op jobs, budget {data['params']['concurrency_budget']} in flight"
    ax.set_title(title, fontsize=9)
    if missing:
        ax.text(0.01, 0.97, "not measured: " + "; ".join(missing), transform=ax.transAxes, fontsize=6, va="top", color="dimgrey", wrap=True)
    ax.set_ylim(0, max(vals + [1]) * 1.25)


def peers(ax, data):
    rows = measured(data, "peers")
    xs = range(len(rows))
    vals = [t["median_jobs_per_s"] for t in rows]
    cols = [colour(t) if t["kind"] == "sidecar" else "#8c564b" for t in rows]
    bars = ax.bar(xs, vals, color=cols, edgecolor="white")
    for bar, t in zip(bars, rows):
        runs = [r["jobs_per_s"] for r in t["runs"] if not r.get("error")]
        x = bar.get_x() + bar.get_width() / 2
        ax.plot([x] * len(runs), runs, "k.", markersize=3)
        cpu = (t.get("processes_cpu_s_per_10k") or 0) + (t.get("postgres_cpu_s_per_10k") or 0)
        ax.annotate(f"{t['median_jobs_per_s']:,.0f}\np99 {t.get('median_p99_ms', 0):.1f} ms\n{cpu:.2f} CPU-s/10k",
                    (x, bar.get_height()), ha="center", va="bottom", fontsize=6.5)
    # The result_ttl 0 rows delete done rows (as graphile-worker does): say so under their bars.
    labels = [f"sidecar\n{t['sdk'].capitalize()} stdio" + ("\nresult_ttl 0" if t["key"].endswith("-ttl0") else "")
              if t["kind"] == "sidecar" else t["label"].replace(" (", "\n(") for t in rows]
    ax.set_xticks(list(xs), labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylim(max(1, min(vals + [1e9]) / 3), max(vals + [1]) * 6)
    ax.set_ylabel("jobs/s (median, log; dots: runs)")
    p = data["params"]
    ax.set_title(f"1c. Native Postgres queues beside the sidecar, same rounds ({p.get('peers_jobs_per_run', 0):,} jobs, "
                 f"Procrastinate {p.get('peers_slow_jobs_per_run', 0):,}; budget {p['concurrency_budget']})", fontsize=9)
    missing = [t["label"] for t in data.get("peers") or [] if t.get("status")]
    if missing:
        ax.text(0.01, 0.97, "not measured: " + "; ".join(missing), transform=ax.transAxes, fontsize=6, va="top", color="dimgrey", wrap=True)


def latency(ax, data):
    rows = measured(data, "latency")
    width = 0.8 / 3
    for i, (key, name) in enumerate((("median_p50_ms", "p50"), ("median_p95_ms", "p95"), ("median_p99_ms", "p99"))):
        xs = [j + (i - 1) * width for j in range(len(rows))]
        bars = ax.bar(xs, [r[key] for r in rows], width, label=name, color=["#c6dbef", "#6baed6", "#08519c"][i])
        for bar in bars:
            ax.annotate(f"{bar.get_height():.1f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=6)
    soniq = next((r["median_p99_ms"] for r in rows if r["key"] == "soniq"), None)
    if soniq:
        ax.axhline(soniq / 5, color="red", linestyle="--", linewidth=0.8)
        ax.text(len(rows) - 0.5, soniq / 5, "goal p99 ≤ Soniq's / 5", color="red", fontsize=7, ha="right", va="bottom")
    ax.set_xticks(range(len(rows)), [short(r) for r in rows], fontsize=7)
    ax.set_ylabel("enqueue → handler start, ms (log)")
    ax.set_yscale("log")
    ax.set_title(f"3. Pickup latency at {data['params']['latency_rate_per_s']} jobs/s (median over runs)", fontsize=9)
    ax.legend(fontsize=7)


def shutdown(ax, data):
    rows = measured(data, "shutdown")
    for j, r in enumerate(rows):
        ys = [run["overshoot_ms"] for run in r["runs"] if not run.get("error")]
        ax.plot([j] * len(ys), ys, "o", color=colour(r), alpha=0.7)
        ax.annotate(f"median {r['median_overshoot_ms']:+.0f} ms", (j, max(ys)), ha="center", va="bottom", fontsize=7, xytext=(0, 4), textcoords="offset points")
    ax.axhline(200, color="red", linestyle="--", linewidth=0.8)
    ax.axhline(0, color="black", linewidth=0.5)
    ax.text(len(rows) - 0.5, 200, "goal +200 ms", color="red", fontsize=7, ha="right", va="bottom")
    ax.set_xticks(range(len(rows)), [short(r) for r in rows], fontsize=7)
    ax.set_xlim(-0.5, len(rows) - 0.5)
    ax.set_ylabel("exit − shutdown_timeout, ms")
    ax.set_title(f"4. SIGTERM → exit, async-forced path, shutdown_timeout {data['params']['shutdown_timeout_s']:g} s", fontsize=9)


def cost(ax, data):
    rows = [t for t in measured(data, "throughput") if t["kind"] != "ceiling"]
    parts = [
        ("sidecar_cpu_s_per_10k", "sidecar", BLUE),
        ("handler_cpu_s_per_10k", "handler processes", "#6baed6"),
        ("worker_cpu_s_per_10k", "Soniq workers", GREY),
        ("postgres_cpu_s_per_10k", "Postgres", GREEN),
    ]
    width = 0.8 / len(parts)
    top = [0.0] * len(rows)
    for i, (key, name, col) in enumerate(parts):
        xs, vals = [], []
        for j, t in enumerate(rows):
            v = t.get(key) or 0
            if v > 0:
                xs.append(j + (i - 1.5) * width)
                vals.append(v)
                top[j] = max(top[j], v)
        ax.bar(xs, vals, width, label=name, color=col)
    for j, t in enumerate(rows):
        if t.get("sidecar_peak_rss_mb"):
            ax.annotate(f"sidecar RSS {t['sidecar_peak_rss_mb']:.0f} MiB", (j, top[j]), ha="center", va="bottom", fontsize=7,
                        xytext=(0, 3), textcoords="offset points")
    ax.set_xticks(range(len(rows)), [short(t) for t in rows], fontsize=7)
    ax.set_ylabel("CPU seconds per 10,000 jobs (log)")
    ax.set_yscale("log")
    ax.set_title("5. Cost: CPU per 10,000 jobs by process (medians)", fontsize=9)
    ax.legend(fontsize=7)


def depth(ax, data):
    pts = [p for p in data.get("depth") or [] if not p.get("error")]
    ax.set_title("6a. Queue depth (Python stdio, index from migrate)", fontsize=9)
    if not pts:
        ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center")
        return
    xs = [p["queued"] for p in pts]
    ax.plot(xs, [p["jobs_per_s"] for p in pts], "o-", color=BLUE, label="drain jobs/s")
    ax.set_xscale("log")
    ax.set_xlabel("jobs queued")
    ax.set_ylabel("jobs/s", color=BLUE)
    ax.set_ylim(0, max(p["jobs_per_s"] for p in pts) * 1.3)
    ax2 = ax.twinx()
    ax2.plot(xs, [p["claim_ms"] for p in pts], "s--", color=ORANGE, label="one claim, ms")
    ax2.set_ylabel(f"one claim of {data['params']['concurrency_budget']}, ms", color=ORANGE)
    ax2.set_ylim(0, max(p["claim_ms"] for p in pts) * 1.5)
    for p in pts:
        ax.annotate(f"{p['jobs_per_s']:,.0f}", (p["queued"], p["jobs_per_s"]), fontsize=7, xytext=(0, 4), textcoords="offset points", ha="center")
        ax2.annotate(f"{p['claim_ms']:.2f} ms", (p["queued"], p["claim_ms"]), fontsize=7, xytext=(0, -11), textcoords="offset points", ha="center", color=ORANGE)


def sharing(ax, data):
    rows = [r for r in data.get("sharing") or [] if r.get("median_jobs_per_s")]
    ax.set_title(f"6b. Sidecars sharing one database, total budget {data['params']['concurrency_budget']}", fontsize=9)
    if not rows:
        ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center")
        return
    # The curve with the default claim_ahead, and with claim_ahead 0 when run.
    for off, col, name in ((False, BLUE, "default claim_ahead"), (True, GREY, "claim_ahead 0")):
        line = [r for r in rows if bool(r.get("claim_ahead_0")) == off]
        if not line:
            continue
        xs = [r["sidecars"] for r in line]
        ax.plot(xs, [r["median_jobs_per_s"] for r in line], "o-", color=col, label=name)
        for r in line:
            ax.plot([r["sidecars"]] * len(r["runs_jobs_per_s"]), r["runs_jobs_per_s"], "k.", markersize=3)
            size = (r.get("cost") or {}).get("rows_per_claim")
            label = f"{r['median_jobs_per_s']:,.0f}" + (f"\n{size:.0f} rows/claim" if size else "")
            ax.annotate(label, (r["sidecars"], r["median_jobs_per_s"]), fontsize=6.5, xytext=(0, 4), textcoords="offset points", ha="center")
        if not off:
            one = line[0]["median_jobs_per_s"]
            ax.axhline(0.9 * one, color="red", linestyle="--", linewidth=0.8)
            ax.text(xs[-1], 0.9 * one, "goal 90 % of one", color="red", fontsize=7, ha="right", va="top")
    ax.set_xticks(sorted({r["sidecars"] for r in rows}))
    ax.set_xlabel("sidecars")
    ax.set_ylabel("jobs/s (median; dots: runs)")
    ax.set_ylim(0, max(r["median_jobs_per_s"] for r in rows) * 1.35)
    ax.legend(fontsize=7, loc="lower left")


def sqlite_label(t):
    if t.get("kind") == "soniq":
        return f"Soniq 0.1.0\n{t['processes']} × {t['concurrency_each']}"
    return f"sidecar\n{t['sdk'].capitalize()} stdio"


def sqlite_throughput(ax, data):
    sq = data["sqlite"]
    rows = [t for t in sq.get("throughput") or [] if not t.get("status")]
    soniq = next((t["median_jobs_per_s"] for t in rows if t["key"] == "sqlite-soniq"), None)
    xs = range(len(rows))
    vals = [t["median_jobs_per_s"] for t in rows]
    bars = ax.bar(xs, vals, color=[colour(t) for t in rows], edgecolor="white",
                  hatch=["xx" if t["key"] == "sqlite-soniq-budget" else "" for t in rows])
    for bar, t in zip(bars, rows):
        runs = [r["jobs_per_s"] for r in t["runs"] if not r.get("error")]
        x = bar.get_x() + bar.get_width() / 2
        ax.plot([x] * len(runs), runs, "k.", markersize=3)
        label = f"{t['median_jobs_per_s']:,.0f}"
        if soniq and t["key"] != "sqlite-soniq":
            label += f"\n{t['median_jobs_per_s'] / soniq:.1f}× Soniq 1 × 1"
        if t.get("median_claims_per_job", 1) > 1.01:
            label += f"\neach job run {t['median_claims_per_job']:.1f}×"
        ax.annotate(label, (x, bar.get_height()), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(xs), [sqlite_label(t) for t in rows], fontsize=7)
    ax.set_ylabel("jobs/s (median; dots: runs)")
    ax.set_ylim(0, max(vals + [1]) * 1.3)
    ax.set_title("7. Embedded SQLite: the sidecar and Soniq's worker on SQLite (no-op jobs)", fontsize=9)
    missing = [t["label"] for t in sq.get("throughput") or [] if t.get("status")]
    if missing:
        ax.text(0.01, 0.97, "not measured: " + "; ".join(missing), transform=ax.transAxes, fontsize=6, va="top", color="dimgrey", wrap=True)


def sqlite_depth(ax, data):
    pts = [p for p in data["sqlite"].get("depth") or [] if not p.get("error")]
    ax.set_title("7. Embedded SQLite: drain rate as the queue grows", fontsize=9)
    for key in dict.fromkeys(p["key"] for p in pts):
        line = [p for p in pts if p["key"] == key]
        col = colour(line[0])
        label = "Soniq 0.1.0, 1 × 1" if line[0]["kind"] == "soniq" else f"sidecar, {line[0]['sdk'].capitalize()} stdio"
        ax.plot([p["queued"] for p in line], [p["jobs_per_s"] for p in line], "-", color=col, label=label)
        for p in line:
            # Hollow: the window ended before the target number of completions.
            ax.plot(p["queued"], p["jobs_per_s"], "o", color=col, markerfacecolor="white" if p.get("capped") else col)
            ax.annotate(f"{p['jobs_per_s']:,.0f}", (p["queued"], p["jobs_per_s"]), fontsize=7, xytext=(0, 5),
                        textcoords="offset points", ha="center")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("jobs queued (hollow: rate over the completions within the window)")
    ax.set_ylabel("jobs/s over the first completions (log)")
    ax.legend(fontsize=7)


def main():
    md, png = sys.argv[1], sys.argv[2]
    data = load(md)
    sq = data.get("sqlite") or {}
    # Only the sections this run measured get a panel.
    panels = [p for p, has in (
        (throughput, measured(data, "throughput")),
        (peers, measured(data, "peers")),
        (latency, measured(data, "latency")),
        (shutdown, measured(data, "shutdown")),
        (cost, [t for t in measured(data, "throughput") if t["kind"] != "ceiling"]),
        (depth, data.get("depth")),
        (sharing, data.get("sharing")),
        (sqlite_throughput, sq.get("throughput")),
        (sqlite_depth, [p for p in sq.get("depth") or [] if not p.get("error")]),
    ) if has]
    nrows = max(1, (len(panels) + 1) // 2)
    height = 4.4 * nrows + 0.5
    fig, axes = plt.subplots(nrows, 2, figsize=(15, height), gridspec_kw={"width_ratios": [1.35, 1]}, squeeze=False)
    cells = [ax for row in axes for ax in row]
    for draw, ax in zip(panels, cells):
        draw(ax, data)
    for ax in cells[len(panels):]:
        ax.set_axis_off()
    if not panels:
        cells[0].text(0.5, 0.5, "no section measured", transform=cells[0].transAxes, ha="center")
    meta = data["meta"]
    fig.suptitle(f"soniq-sidecar benchmarks — {meta.get('date')}, commit {meta.get('commit', '').split(' ')[0]}, "
                 f"{meta.get('cores')} cores ({meta.get('cpu')}), PostgreSQL {meta.get('postgres')}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / height))  # room for the title
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
