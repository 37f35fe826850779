"""Command-line interface (typer): a thin layer over the library."""

from __future__ import annotations

import math
import time

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="ridgexr: where diffusion samples go when they do not memorize.")
console = Console()


@app.command()
def demo(
    n_points: int = typer.Option(2000, min=1, help="points in the random cloud"),
    t: float = typer.Option(0.3, min=1e-6, help="diffusion time of p_t (> 0)"),
    d_star: int = typer.Option(1, min=0, max=1, help="ridge dimension (0 = modes, 1 = curves)"),
    seed: int = typer.Option(0, help="seed of the random cloud"),
):
    """Project a random cloud onto the ridge of the three-point set (0,0), (5,0), (0,5)."""
    from . import OU, SmoothedEmpirical, project_to_ridge

    train = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 7.0, size=(n_points, 2))
    density = SmoothedEmpirical(train, t)
    t0 = time.perf_counter()
    res = project_to_ridge(density, x, d_star)
    elapsed = time.perf_counter() - t0
    dist = np.linalg.norm(res.point - x, axis=1)
    table = Table(title=f"Ridge projection: 3 points, t = {t:g} (alpha = {OU().alpha(t):.4f}, "
                        f"h = {OU().h(t):.4f}), d* = {d_star}")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("points", f"{n_points}")
    table.add_row("converged", f"{res.converged.mean():.1%}")
    table.add_row("on ridge (converged, normal curvature < 0)", f"{res.on_ridge.mean():.1%}")
    table.add_row("degenerate frame", f"{res.degenerate.mean():.1%}")
    table.add_row("median / max SCMS iterations", f"{np.median(res.iterations):.0f} / {res.iterations.max()}")
    table.add_row("median distance moved", f"{np.median(dist):.4f}")
    on = res.on_ridge
    if on.any():
        table.add_row("max residual on ridge", f"{res.residual[on].max():.2e}")
        table.add_row("normal curvature on ridge (min / max)",
                      f"{res.normal_curvature[on].min():.3f} / {res.normal_curvature[on].max():.3f}")
    table.add_row("time", f"{elapsed:.3f} s")
    console.print(table)
    if not math.isclose(float(on.mean()), 1.0):
        console.print(f"[yellow]{(~on).sum()} point(s) not on the ridge (see RidgeProjection flags)")


@app.callback()
def main():
    """ridgexr command-line interface."""


if __name__ == "__main__":
    app()
