"""Three points (0,0),(5,0),(0,5): reach, align and slide in ridge-distance and spread
curves; the exact denoiser memorizes (mode counts near 100%) while finite-width models
spread along the ridge.

Run:  python analyses/three_points_phases.py [--data DIR]
Prints a markdown table; the final-sample figures in docs/figures/three_points_*.png are drawn by
analyses/figures.py.
"""

from __future__ import annotations

from _common import markdown_table, parser, store_for

from ridgexr import analysis


def main(argv=None):
    args = parser(__doc__).parse_args(argv)
    ds = store_for("three-points", args.data)
    summ = analysis.summary_table(ds, r=0.5).compute().to_dataframe().reset_index()
    cols = ["schedule", "width", "reached", "reach_time_median", "align_time_median", "slide_chord_median",
            "spread_final", "near_mode", "near_mode_low", "near_mode_high", "memorized", "memorized_low",
            "memorized_high"]
    print("## three-points: phases, spread, modes, memorization\n")
    print(markdown_table(summ[cols]))


if __name__ == "__main__":
    main()
