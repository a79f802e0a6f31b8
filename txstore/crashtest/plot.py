"""PNG plots of a run (matplotlib, Agg backend; ``pip install matplotlib``, in the ``dev``
extra): recovery time per kill by crash point, and recovery versus wipe-and-replay by state
size."""

from __future__ import annotations

from pathlib import Path

from txstore.crashtest.report import CrashtestReport, size_label

__all__ = ["plot_report"]


def plot_report(report: CrashtestReport, path: Path) -> bool:
    """Write the plot to ``path``; ``False`` (nothing written) without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    panels = 2 if report.wipe else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.5), squeeze=False)
    ax = axes[0][0]
    recs = report.after_kills()
    points = sorted({r.after for r in recs})
    for n, point in enumerate(points):
        ms = [r.ms for r in recs if r.after == point]
        xs = [n + 0.6 * (i / max(len(ms) - 1, 1) - 0.5) for i in range(len(ms))]
        ax.scatter(xs, ms, s=14, alpha=0.75, label=point)
    ax.set_xticks(range(len(points)))
    ax.set_xticklabels([p.replace("task.", "") for p in points], rotation=35, ha="right")
    ax.set_ylabel("recovery time (ms): open + recover + restore")
    ax.set_title(
        f"recovery after {len(report.kills)} SIGKILLs (seed {report.config.get('seed')}): "
        f"lost {report.lost}, leaked {report.leaked}",
        fontsize=9,
    )
    ax.grid(True, axis="y", alpha=0.3)
    if report.wipe:
        ax = axes[0][1]
        keys = [w.keys for w in report.wipe]
        ax.plot(keys, [w.recover_ms for w in report.wipe], "o-", label="txstore: recover + restore")
        ax.plot(keys, [w.wipe_ms for w in report.wipe], "s-", label="wipe + replay changelog")
        for w in report.wipe:
            ax.annotate(f"{w.ratio:.0f}x", (w.keys, w.wipe_ms), textcoords="offset points",
                        xytext=(0, 6), ha="center", fontsize=8)  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xticks(keys)
        ax.set_xticklabels([size_label(k) for k in keys])
        ax.set_xlabel("keys in the store")
        ax.set_ylabel("time to come back after a crash (ms)")
        ax.set_title("recovery vs Kafka EOS wipe-and-replay", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
