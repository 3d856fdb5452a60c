"""matplotlib helpers every plot shares (the Agg backend is chosen in sfreport/__init__.py)."""

from collections.abc import Mapping, Sequence

from matplotlib.axes import Axes


def grouped_bars(ax: Axes, groups: Sequence[str], series: Mapping[str, Sequence[float]],
                 paper: Mapping[str, Sequence[float | None]] | None = None) -> None:
    """One cluster of bars per group, one bar per series (rates in [0, 1]). A zero bar gets a small '0' so it reads as
    measured rather than missing; paper[name][i] (None where the paper gives nothing) is a black dashed cap."""
    n = max(len(series), 1)
    w = 0.8 / n
    marked = False
    for i, (name, vals) in enumerate(series.items()):
        xs = [j + (i - (n - 1) / 2) * w for j in range(len(groups))]
        ax.bar(xs, vals, w, label=name)
        for x, v in zip(xs, vals):
            if v == 0:
                ax.text(x, 0.01, "0", ha="center", va="bottom", fontsize=6)
        for x, p in zip(xs, (paper or {}).get(name, [])):
            if p is not None:
                ax.plot([x - w / 2, x + w / 2], [p, p], c="black", ls="--", lw=1.3, label=None if marked else "paper")
                marked = True
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylim(0, 1.2)
    ax.set_ylabel("rate (fraction of runs)")


def figure_note(picture: str, sentence: str) -> str:
    """The picture's link and one sentence on what it shows, for the end of table.md."""
    return f"\n![{picture.removesuffix('.png')}]({picture})\n\n{sentence}\n"
