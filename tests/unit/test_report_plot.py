"""``mmaplug report --plot``: problem names that do not overlap and a legend beside the bars."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from mmaplug.tune import report

pytest.importorskip("matplotlib", reason="--plot needs matplotlib: pip install 'mmaplug[bench]'")

SETS = ["default", "tuned_table", "tuned_table/loo"]


def result(problems: int) -> dict:
    """A report of *problems* rows with long names, one choice not measured."""
    rows = []
    for i in range(problems):
        row: dict = {"problem": f"bfloat16_TN_bias_gelu_b1_{2048 + i}x14336x5120"}
        for j, name in enumerate(SETS):
            row[name] = {"of_best": None if (i, j) == (1, 2) else 0.6 + 0.02 * (i + j)}
        rows.append(row)
    return {"device": "nvidia_h200_sm90a", "rows": rows, "columns": SETS}


@pytest.mark.parametrize("problems", [1, 19])
def test_labels_and_legend_do_not_overlap(problems: int) -> None:
    """Every problem's name has its own band of the y axis; the legend is outside the axes."""
    import matplotlib.pyplot as plt

    fig = report.plot_figure(result(problems), SETS)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        (ax,) = fig.axes
        labels = [t.get_window_extent(renderer) for t in ax.get_yticklabels()]
        assert len(labels) == problems
        assert not any(a.overlaps(b) for a, b in itertools.combinations(labels, 2))
        legend = ax.get_legend().get_window_extent(renderer)
        assert legend.x0 >= ax.get_window_extent(renderer).x1
    finally:
        plt.close(fig)


def test_plot_writes_a_png(tmp_path: Path) -> None:
    """The file is a PNG whose height grows with the number of problems."""
    from PIL import Image

    small, large = tmp_path / "small.png", tmp_path / "large.png"
    report.plot(result(2), SETS, str(small))
    report.plot(result(20), SETS, str(large))
    with Image.open(small) as a, Image.open(large) as b:
        assert a.format == b.format == "PNG"
        assert b.height > 3 * a.height
