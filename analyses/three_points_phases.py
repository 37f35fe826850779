"""Three points (0,0),(5,0),(0,5): reach, align and slide in ridge-distance and spread
curves; the exact denoiser memorizes (mode counts near 100%) while finite-width models
spread along the ridge.

Run:  python analyses/three_points_phases.py [--data DIR]
Writes docs/figures/three_points_*.png and prints a markdown table.
"""

from __future__ import annotations

from pathlib import Path

from _common import markdown_table, parser, save_png, store_for

from ridgexr import analysis, plot


def main(argv=None):
    args = parser(__doc__).parse_args(argv)
    figs = Path(args.figures)
    ds = store_for("three-points", args.data)
    summ = analysis.summary_table(ds, r=0.5).compute().to_dataframe().reset_index()
    cols = ["schedule", "width", "reached", "reach_time_median", "align_time_median", "slide_chord_median",
            "spread_final", "near_mode", "near_mode_low", "near_mode_high", "memorized", "memorized_low",
            "memorized_high"]
    print("## three-points: phases, spread, modes, memorization\n")
    print(markdown_table(summ[cols]))
    save_png(plot.distance_curves_plot(ds), figs / "three_points_distance.png")  # log axes set by the plot
    save_png(plot.spread_curves_plot(ds), figs / "three_points_spread.png", logx=True)
    save_png(plot.samples_over_time(ds, schedule="h2", width=64, n_frames=3).last, figs / "three_points_h2_w64.png")
    save_png(plot.samples_over_time(ds, schedule="exact", width=64, n_frames=3).last,
             figs / "three_points_exact.png")


if __name__ == "__main__":
    main()
