"""Width and tau sweeps on the two-point set: the memorization-to-generalization transition.

Run:  python analyses/sweeps.py [--data DIR]
Prints the near-mode share (the paper's count) and the d1/d2 memorized share per (schedule,
width) and (schedule, tau) with Wilson
CIs, and the critical width / tau where it crosses 0.5; the figure docs/figures/sweep_width_near_mode.png
is drawn by analyses/figures.py.
"""

from __future__ import annotations

from _common import markdown_table, parser, store_for

from ridgexr import analysis


def main(argv=None):
    args = parser(__doc__).parse_args(argv)
    for name, dim in (("two-points-widths", "width"), ("two-points-tau", "tau")):
        ds = store_for(name, args.data)
        for func, var in ((analysis.near_mode_fraction, "near_mode"), (analysis.memorization_fraction, "memorized")):
            share = func(ds).compute()
            df = share.to_dataframe().reset_index()
            print(f"## {name}: {var} share with 95% Wilson interval\n")
            print(markdown_table(df[["schedule", dim, var, f"{var}_low", f"{var}_high"]]))
            squeezed = share.squeeze(drop=True) if dim == "tau" else (share.isel(tau=0, drop=True)
                                                                      if "tau" in share.dims else share)
            crit = analysis.phase_transition(squeezed, dim=dim, level=0.5).compute()
            print(f"\ncritical {dim} ({var} = 0.5):\n")
            print(markdown_table(crit.to_dataframe().reset_index()[["schedule", "critical", "critical_low",
                                                                       "critical_high"]]))
            print()


if __name__ == "__main__":
    main()
