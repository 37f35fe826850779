"""Width and tau sweeps on the two-point set: the memorization-to-generalization transition.

Run:  python analyses/sweeps.py [--data DIR]
Prints the memorization fraction per (schedule, width) and (schedule, tau) with bootstrap
CIs, and the critical width / tau where it crosses 0.5; writes docs/figures/sweep_*.png.
"""

from __future__ import annotations

from pathlib import Path

from _common import markdown_table, parser, save_png, store_for

from ridgexr import analysis, plot


def main(argv=None):
    args = parser(__doc__).parse_args(argv)
    figs = Path(args.figures)
    for name, dim in (("two-points-widths", "width"), ("two-points-tau", "tau")):
        ds = store_for(name, args.data)
        memo = analysis.memorization_fraction(ds, n_boot=500).compute()
        df = memo.to_dataframe().reset_index()
        print(f"## {name}: memorization fraction (d1/d2 < 1/3) with 95% bootstrap CI\n")
        print(markdown_table(df[["schedule", dim, "memorized", "memorized_low", "memorized_high"]]))
        crit = analysis.phase_transition(memo.squeeze(drop=True) if dim == "tau" else memo.isel(tau=0, drop=True)
                                         if "tau" in memo.dims else memo, dim=dim, level=0.5).compute()
        print(f"\ncritical {dim} (memorized = 0.5):\n")
        print(markdown_table(crit.to_dataframe().reset_index()[["schedule", "critical", "critical_low",
                                                                   "critical_high"]]))
        print()
        save_png(plot.phase_diagram(ds, x=dim), figs / f"sweep_{dim}.png")


if __name__ == "__main__":
    main()
