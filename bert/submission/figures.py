"""What every plot of the project does last (bert/submission/plot.py and metrics_plot.py)."""

from __future__ import annotations

from pathlib import Path


def save_figure(fig, out: Path) -> None:
    """Lay out, write (folders made) and release a figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
