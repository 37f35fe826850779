"""Command-line interface (typer): a thin layer over the library.

A user error (bad input, a refused store, a file system problem) is one line on stderr and
exit status 2; ``--debug`` shows the traceback instead.  Ctrl-C and SIGTERM stop a run
cleanly: the lock is released and the store resumes with the next ``ridgexr run``
(exit status 130).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import signal
import sys
import threading
import time
import warnings

import typer
from rich.console import Console
from rich.table import Table

from . import defaults

class _AnywhereOptions(typer.core.TyperGroup):
    """The command group, with ``--debug`` / ``--no-debug`` accepted anywhere on the command line (``ridgexr run X
    --debug``): a group option, moved before the command name (up to a ``--``, after which words are arguments)."""

    def parse_args(self, ctx, args):
        end = args.index("--") if "--" in args else len(args)
        flags = [a for a in args[:end] if a in ("--debug", "--no-debug")]  # the last one given wins, as click's
        if flags:
            args = flags + [a for a in args[:end] if a not in flags] + args[end:]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_AnywhereOptions, add_completion=False, no_args_is_help=True,
                  help="ridgexr: where diffusion samples go when they do not memorize.")
console = Console() if sys.stdout.isatty() else Console(width=140)
err_console = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=200)
_STATE = {"debug": False, "interrupted": False}


def _describe(exc: BaseException) -> str:
    """One line on what went wrong: OS errors name the path and the cause; the exception's notes
    (``add_note``: e.g. that ``--overwrite`` kept the old store) follow after a semicolon.  A catalog
    file with several problems is the exception: one line naming the file, then one line per problem."""
    if isinstance(exc, OSError) and exc.errno is not None:
        where = f" {exc.filename!r}" if exc.filename else ""
        cause = {errno.ENOSPC: "the disk is full", errno.EACCES: "permission denied",
                 errno.ENOTDIR: "a path component is a file, not a folder",
                 errno.EEXIST: "it exists and is not a folder",
                 errno.EROFS: "read-only file system"}.get(exc.errno, exc.strerror or str(exc))
        text = f"cannot use{where}: {cause}"
    elif isinstance(exc, MemoryError):
        text = "out of memory (reduce n_samples, block_steps or the training sample)"
    else:
        text = str(exc)
    text = "; ".join([text, *getattr(exc, "__notes__", ())])
    from .catalog import CatalogError

    # a catalog file's problems, one line each under the line naming the file; anything else on one line
    return text if isinstance(exc, CatalogError) else text.replace("\n", " | ")


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """ridgexr's store and catalog warnings (:class:`ridgexr.store.StoreWarning`,
    :class:`ridgexr.catalog.CatalogWarning`) as one line on stderr; others as Python shows them."""
    from .catalog import CatalogWarning

    own = (CatalogWarning, *(getattr(sys.modules[m], w) for m, w in (("ridgexr.store", "StoreWarning"),
                                                                    ("ridgexr.explore", "ExposedWarning"))
                             if m in sys.modules))  # from their modules, once loaded: `list` imports neither
    if issubclass(category, own) and not _STATE["debug"]:
        from rich.markup import escape

        err_console.print(f"[yellow]warning:[/] {escape(str(message))}", soft_wrap=True, highlight=False)
        return
    _SHOWWARNING(message, category, filename, lineno, file, line)


_SHOWWARNING = warnings.showwarning


def _quiet_after_interrupt(unraisable) -> None:
    """Unraisable-exception hook: once a run is interrupted, drop the reports Python makes of

    * the interrupt itself when it landed in a finalizer or weakref callback, where it cannot be
      raised ("Exception ignored in ..."); it is raised again at the next progress update, and
    * the coroutines finalised after their event loop closed (zarr's abandoned background writes).

    Anything else, and everything before an interrupt, goes to Python's default hook."""
    import inspect

    if _STATE["interrupted"] and (
            issubclass(unraisable.exc_type, KeyboardInterrupt)
            or inspect.iscoroutine(unraisable.object) or inspect.isasyncgen(unraisable.object)):
        return
    sys.__unraisablehook__(unraisable)


@contextlib.contextmanager
def user_errors():
    """Turn user errors into one line and exit status 2 (``--debug``: re-raise with the traceback)."""
    from pydantic import ValidationError

    from .catalog import CatalogError

    # the run's and the store's own errors (RuntimeErrors) can only come from those modules once
    # they ran: look them up then, so that `ridgexr list` imports neither (nor torch, xarray, zarr)
    own = (("ridgexr.run.runner", "ConfigMismatchError"), ("ridgexr.store", "StoreLockedError"),
           ("ridgexr.store", "StoreReplacedError"))
    try:
        yield
    except KeyboardInterrupt as exc:
        if _STATE["debug"]:
            raise
        # zarr's I/O runs on an asyncio loop in a background thread; the writes abandoned by the
        # interrupt fail at interpreter shutdown and asyncio would log each one. The store does not
        # need them (the interrupted cell is not marked complete and is redone on resume).
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        # the same abandoned coroutines, collected when the loop is already closed, are reported as
        # "Exception ignored in <coroutine ...>" by the unraisable hook: silence those, only those.
        # The hook stays installed: they are collected at interpreter shutdown.
        _STATE["interrupted"] = True
        sys.unraisablehook = _quiet_after_interrupt
        notes = "".join(f"; {n}" for n in getattr(exc, "__notes__", ()))
        err_console.print(f"[yellow]interrupted:[/] stopped cleanly; rerun the same command to resume{notes}",
                          soft_wrap=True, highlight=False)
        raise typer.Exit(130) from None
    except (CatalogError, ValueError, TypeError, OSError, MemoryError, ValidationError, KeyError,
            RuntimeError) as exc:  # FileNotFoundError is an OSError
        if isinstance(exc, RuntimeError) and not isinstance(exc, tuple(
                getattr(sys.modules[mod], name) for mod, name in own if mod in sys.modules)):
            raise
        if _STATE["debug"]:
            raise
        from rich.markup import escape  # a message's own brackets ("got [inf]") are text, not markup

        err_console.print(f"[red]error:[/] {escape(_describe(exc))}", soft_wrap=True, highlight=False)
        raise typer.Exit(2) from None


def _on_stop_signal(signum, frame):
    """Ctrl-C and SIGTERM during a run: remember the request, then raise KeyboardInterrupt."""
    _STATE["interrupted"] = True
    raise KeyboardInterrupt


def _raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt again if a stop was requested but the first one was swallowed.

    A signal handler's exception cannot propagate from a finalizer or a weakref callback (the
    garbage collector may run one at any allocation): Python reports it as "Exception ignored"
    and goes on, and the run would finish as if never interrupted. Progress updates, made in the
    main thread after every block and every fit, are where such a lost stop is raised again."""
    if _STATE["interrupted"] and threading.current_thread() is threading.main_thread():
        raise KeyboardInterrupt


@contextlib.contextmanager
def _stop_signals():
    """Within: Ctrl-C and SIGTERM raise KeyboardInterrupt and are remembered (``_raise_if_interrupted``).

    The previous handlers come back on every way out; the unraisable hook too, unless the run was
    interrupted (zarr's abandoned writes are finalised at interpreter shutdown, see ``user_errors``)."""
    _STATE["interrupted"] = False
    hook = sys.unraisablehook
    previous = {sig: signal.signal(sig, _on_stop_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    sys.unraisablehook = _quiet_after_interrupt
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if not _STATE["interrupted"]:
            sys.unraisablehook = hook


@contextlib.contextmanager
def _dask_progress(scheduler):
    """dask's progress bar for a computation: the local one in-process, ``progress`` of futures on a cluster."""
    if scheduler:
        yield  # the cluster's dashboard shows the task stream; nothing is printed per task
        return
    from dask.diagnostics import ProgressBar

    with ProgressBar(minimum=1.0, dt=0.5, out=sys.stderr):
        yield


@app.command()
def demo(
    n_points: int = typer.Option(2000, min=1, help="points in the random cloud"),
    t: float = typer.Option(0.3, min=1e-6, help="diffusion time of p_t (> 0)"),
    d_star: int = typer.Option(1, min=0, max=1, help="ridge dimension (0 = modes, 1 = curves)"),
    seed: int = typer.Option(0, help="seed of the random cloud"),
):
    """Project a random cloud onto the ridge of the three-point set (0,0), (5,0), (0,5)."""
    import numpy as np

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


#: where the output is not a terminal, the run's progress writes a plain line at least this often (seconds)
PLAIN_PROGRESS_SECONDS = 60.0


def _progress(out=None):
    """The run's progress bars (on ``out``, default stdout's console); each update (from the main thread) is also an
    interruption point."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    class RunProgress(Progress):
        """Also writes a plain line per tenth of a task (or per minute), and a stage's changed message
        at most once a minute, where the output is not a terminal: a log file keeps no frames of a
        live bar, only its last one."""

        _logged: dict

        def update(self, task_id, *args, **kwargs):
            _raise_if_interrupted()
            super().update(task_id, *args, **kwargs)
            self._plain_line(task_id)

        def advance(self, task_id, *args, **kwargs):
            _raise_if_interrupted()
            super().advance(task_id, *args, **kwargs)
            self._plain_line(task_id)

        def _plain_line(self, task_id):
            if self.console.is_terminal:
                return
            task = next((t for t in self.tasks if t.id == task_id), None)
            if task is None or not task.visible:
                return
            logged = self.__dict__.setdefault("_logged", {})
            if not task.total:  # a stage without a count (fitting models): its message, at most once a minute
                last_text, last_time = logged.get(task_id, (None, -float("inf")))
                if task.description != last_text and time.monotonic() - last_time >= PLAIN_PROGRESS_SECONDS:
                    logged[task_id] = (task.description, time.monotonic())
                    self.console.print(f"{task.description} ({task.elapsed or 0.0:.0f} s)", highlight=False,
                                       markup=False)
                return
            tenth = int(10 * task.completed // task.total)
            last_tenth, last_time = logged.get(task_id, (0, time.monotonic()))
            if tenth > last_tenth or time.monotonic() - last_time >= PLAIN_PROGRESS_SECONDS:
                logged[task_id] = (tenth, time.monotonic())
                elapsed = task.finished_time if task.finished else task.elapsed
                self.console.print(f"{task.description}: {task.completed:g}/{task.total:g} "
                                   f"({elapsed or 0.0:.0f} s)", highlight=False, markup=False)

    return RunProgress(SpinnerColumn(), TextColumn("[progress.description]{task.description}"), BarColumn(),
                       MofNCompleteColumn(), TimeElapsedColumn(), console=out or console, transient=False)


#: the metavar of a flag: none (typer's help would print "--debug <bool>", as if it took a value)
FLAG = ""
DATA_DIR_HELP = ("data folder of the stores (default: $RIDGEXR_DATA, else the platform's user data folder, "
                 "e.g. ~/.local/share/ridgexr)")
CATALOG_HELP = "an extra catalog YAML file (repeatable), read after the built-in ones"


def _data_dir_option():
    return typer.Option(None, "--data-dir", help=DATA_DIR_HELP)


def _catalog_option():
    return typer.Option(None, "--catalog", help=CATALOG_HELP)


def _catalog(catalog_files, data_dir):
    from .catalog import open_catalog

    return open_catalog(files=list(catalog_files or ()), data_dir=data_dir)


def _load_experiment(name: str, catalog_files=(), data_dir=None):
    from pathlib import Path

    from .catalog import experiment_from_file

    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return experiment_from_file(p)
    if p.is_dir():  # one line, not a usage box
        raise FileNotFoundError(f"{name!r} is a folder, not a catalog file or entry name: give a catalog file "
                                "(ridgexr run FILE.yaml), or the folder with --catalog DIR and an entry name")
    if p.suffix in (".yaml", ".yml"):
        raise FileNotFoundError(f"catalog file {name!r} does not exist")
    cat = _catalog(catalog_files, data_dir)
    if name not in cat.experiments and cat.skipped:  # it may be in the skipped file: its error is the answer
        raise cat.not_found(name)
    if name not in cat.experiments:
        raise typer.BadParameter(f"no experiment {name!r} in the catalogs{cat.did_you_mean(name)} ('ridgexr list' "
                                 f"lists their {len(cat)} entries; add one with --catalog FILE or $RIDGEXR_CATALOGS)",
                                 param_hint="NAME")
    return cat[name]


@app.command()
def run(
    name: str = typer.Argument(defaults.DEFAULT_ENTRY, help="catalog entry name, or a catalog YAML file with one "
                              "entry"),
    data_dir: str = _data_dir_option(),
    catalog: list[str] = _catalog_option(),
    device: str = typer.Option("cpu", "--device", help="torch device: cpu or cuda"),
    scheduler: str = typer.Option(None, "--scheduler",
                                  help="'local' (LocalCluster of processes) or a dask scheduler address; "
                                       "default: in-process, or $DASK_SCHEDULER_ADDRESS"),
    workers: int = typer.Option(2, "--workers", min=1, help="workers of --scheduler local"),
    sample_block: int = typer.Option(None, "--sample-block", min=1,
                                     help="split each cell's observation into parts of this many samples: on the "
                                          "--scheduler's workers (one cell across a cluster), else in-process"),
    overwrite: bool = typer.Option(False, "--overwrite/--no-overwrite", metavar=FLAG, help="replace an existing store (the new one is "
                                   "written beside it and swapped in only once created)"),
    force: bool = typer.Option(False, "--force/--no-force", metavar=FLAG, help="run even when the estimated memory or store size "
                               "exceeds this machine"),
    plan: bool = typer.Option(False, "--plan/--no-plan", metavar=FLAG, help="print the stages, their estimated time, the "
                              "peak memory and the store size, and exit: nothing is loaded, trained or written"),
    threads: int = typer.Option(None, "--threads", min=1, help="CPU threads (default: $RIDGEXR_THREADS, else "
                                "$OMP_NUM_THREADS, else the cores not busy with other processes at the start: cores "
                                "minus the load average, at least 1; docs/performance.md)"),
    cells: list[str] = typer.Option([], "--cells", help="run only the cells with these labels, DIM=LABEL[,LABEL...] "
                                    "(repeatable, e.g. --cells n_train=8,16): a later run resumes the store with "
                                    "the others, so a long entry runs in pieces"),
):
    """Train every (schedule, width) cell, sample, and stream everything into a Zarr v3 store."""
    from .catalog import resolve_store
    from .threads import limit_library_threads, resolve_threads

    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise typer.BadParameter(f"device must be cpu or cuda, got {device!r}", param_hint="--device")
    where = _cell_selection(cells)
    if plan:
        with user_errors():
            _print_plan(_load_experiment(name, catalog, data_dir), data_dir, where)
        return
    with user_errors():
        n_threads, source = resolve_threads(threads)
    limit_library_threads(n_threads)  # before numpy's and torch's libraries load (below)
    from .run import run_experiment

    with _stop_signals(), user_errors():
        exp = _load_experiment(name, catalog, data_dir)
        store = resolve_store(exp, data_dir)
        dims = " x ".join(f"{len(v)} {n}" for n, v in exp.cell_coords())
        console.print(f"[bold]ridgexr run[/] {exp.name}: {dims or 'one cell'}, {exp.n_samples} samples, "
                      f"{exp.process.n_steps} steps, {n_threads} thread(s) ({source}) -> {store}")
        t0 = time.perf_counter()
        with _progress() as progress:
            res = run_experiment(exp, store=store, device=device, scheduler=scheduler, overwrite=overwrite,
                                 n_workers=workers, progress=progress, force=force, sample_block=sample_block,
                                 n_threads=n_threads, cells=where)
        _raise_if_interrupted()  # a stop swallowed after the last progress update still exits 130
        elapsed = time.perf_counter() - t0
    t_last = exp.process.t_min
    if exp.sampler.kind == "scheduler":  # the OU time of the scheduler's last timestep
        from .models.diffusers.denoiser import entry_scheduler
        from .sampling import scheduler_grid

        t_last = float(scheduler_grid(entry_scheduler(exp)[0], exp.process.n_steps)[-1])
    _summary_table(res.summary, f"{exp.name}: final step (t = {t_last:g})", d=_data_dim(exp),
                   more=f"ridgexr info {exp.name} --all-rows")
    console.print(f"ran {res.cells_run} cell(s), kept {res.cells_skipped} complete cell(s) in {elapsed:.1f} s"
                  + (f"; {res.cells_left} cell(s) outside --cells not run yet (the same command without --cells, "
                     "or with theirs, resumes the store)" if res.cells_left else ""))
    console.print(f"store: [bold]{res.store}[/]  (open with ridgexr.open_dataset({str(res.store)!r}))")


def _cell_selection(cells: list[str]) -> dict[str, list[str]]:
    """``--cells DIM=LABEL[,LABEL...]`` (repeatable) as ``{dim: [labels]}``; the labels are matched against the
    entry's by :meth:`ridgexr.store.StoreLayout.select`."""
    where: dict[str, list[str]] = {}
    for item in cells:
        dim, sep, labels = item.partition("=")
        if not sep or not dim.strip() or not labels.strip():
            raise typer.BadParameter(f"expected DIM=LABEL[,LABEL...], got {item!r}", param_hint="--cells")
        where.setdefault(dim.strip(), []).extend(lab.strip() for lab in labels.split(",") if lab.strip())
    return where


def _print_plan(exp, data_dir, where: dict[str, list[str]] | None = None) -> None:
    """``ridgexr run --plan``: the :class:`ridgexr.run.Plan` a run of the entry executes, priced from the training
    set's shape (:func:`ridgexr.run.plan_run` with ``read_data=False``): its stages and their estimated seconds, its
    peak memory and store size, and whether this machine would refuse it; no data loaded, no VAE trained, nothing
    written.  With ``where`` (``--cells``) the stages are the piece's: the cells it selects, complete or not.  Where a
    store is already at the path, a line says what a rerun would pick up there
    (:func:`ridgexr.run.resumes.what_resumes`: its complete cells among those, its unfinished training runs and
    their epochs), and a column prices what a rerun has left (the same estimate without the complete cells, each
    training run from its checkpoint's epoch)."""
    from rich.markup import escape

    from .run import plan_run
    from .run.plan import estimate_stage_seconds, format_seconds, resumed_training, scms_upper_seconds
    from .run.resumes import what_resumes

    plan = plan_run(exp, data_dir=data_dir, read_data=False, cells=where).summary()
    seconds, upper, missing, shape = plan["stage_seconds"], plan["scms_upper_seconds"], plan["missing_data"], \
        plan["train_shape"]
    state = what_resumes(exp, plan["store"], where)
    left = left_upper = None
    reached = {} if state.other_shape else resumed_training(exp, state.reached, where, state.done)
    if state.done or reached:  # what a rerun there has left, priced alike
        left = estimate_stage_seconds(exp, shape, cells=where, done=state.done, reached=reached)
        left_upper = scms_upper_seconds(exp, shape, where, state.done)
    verdict = "it fits this machine" if plan["refused"] is None else f"refused without --force: {plan['refused']}"
    if missing:
        verdict += "; but it cannot run here before its training data are installed (above)"
    dims = " x ".join(f"{len(v)} {n}" for n, v in exp.cell_coords())
    total = sum(seconds.values()) or 1.0
    piece = " ".join(f"{dim}={','.join(labels)}" for dim, labels in (where or {}).items())
    runs = f"{plan['n_cells']} run by --cells {piece}" if piece else f"{plan['n_cells']} run"
    table = Table(title=f"plan of {exp.name}: {dims or 'one cell'} ({runs}), {exp.n_samples} "
                        f"samples, {exp.process.n_steps} steps, training set {shape[0]} x {shape[1]}"
                        f"{' (not installed here)' if missing else ''} -> {plan['store']}",
                  caption="estimated on 2 idle cores (ridgexr.run.plan's rates; within 2x of the runs timed idle: "
                          "docs/performance.md); nothing was loaded, trained or written"
                          + ("; 'at ridge.max_iter': every SCMS projection run to its cap (degenerate frames do)"
                             if upper is not None else "")
                          + ("; 'left there': without the cells the store marks complete, each training run from "
                             "its checkpoint's epoch" if left is not None else ""))
    columns = [("stage", False), ("estimated time", True), ("share", True)] + ([("left there", True)] if left else [])
    for c, right in columns:
        table.add_column(c, justify="right" if right else "left")
    for stage, t in seconds.items():
        table.add_row(stage, format_seconds(t), f"{100 * t / total:.0f}%",
                      *([format_seconds(left[stage])] if left else []))
    table.add_row("total", format_seconds(sum(seconds.values())), "",
                  *([format_seconds(sum(left.values()))] if left else []))
    if upper is not None:
        table.add_row(f"sampling and observation at ridge.max_iter = {plan['max_iter']}", format_seconds(upper), "",
                      *([format_seconds(left_upper)] if left else []))
    console.print(table)
    if missing:
        console.print(f"[yellow]training data missing:[/] {escape(missing)}", soft_wrap=True, highlight=False)
    gb = 2**30
    console.print(f"peak memory ~{plan['peak_memory'] / gb:.3g} GiB ({plan['memory_stage']}; driven by "
                  f"{', '.join(plan['memory_drivers'])}); store up to {plan['store_size'] / gb:.3g} GiB; {verdict}",
                  soft_wrap=True, highlight=False, markup=False)
    there = _resume_line(state, priced=left is not None)
    if there:
        console.print(there, soft_wrap=True, highlight=False, markup=False)


def _grouped(k: int) -> str:
    """``k`` with its thousands apart, as the docs write them (``7 320``)."""
    return f"{k:,}".replace(",", " ")


def _resume_line(state, priced: bool = False) -> str:
    """What ``ridgexr run --plan`` says of a store already at the run's path (a
    :class:`ridgexr.run.resumes.Resumable`); "" where there is none.  ``priced``: the table has a 'left there'
    column."""
    if not state.exists:
        return ""
    if state.other_shape:
        return (f"a store with another cell grid is at {state.store} (another configuration's): the run refuses it "
                "without --overwrite")
    parts = [f"the store there marks {state.complete or 'none'} of these {state.selected} cells complete"
             + (" (a run of this configuration keeps them)" if state.complete else "")]
    if state.training:
        runs = ", ".join(f"{folder} at epoch {_grouped(epoch)} of {_grouped(epochs)}" if epoch is not None
                         else f"{folder} (its checkpoint cannot be read)" for folder, epoch, epochs in state.training)
        parts.append(f"unfinished training there resumes from its checkpoint: {runs}")
    if priced:
        parts.append("the table's 'left there' prices what a rerun has left")
    return "; ".join(parts)


_SHORT = {"ridge_distance": "ridge dist", "converged": "conv", "rms_residual_normal": "rms e_N",
          "rms_residual_tangent": "rms e_T", "near_mode": "near", "memorized": "memo", "diverged": "div", "excess_loss": "excess",
          "schedule": "sched", "degenerate": "degen"}


def _data_dim(exp) -> int | None:
    from .datasets import training_shape

    try:
        return training_shape(exp.dataset, base_dir=exp.base_dir)[1]
    except Exception:  # only a caption note depends on it
        return None


#: rows of a summary table printed by default; the tallies below it count every row
SUMMARY_MAX_ROWS = 100


def _summary_table(rows, title, d: int | None = None, *, max_rows: int | None = SUMMARY_MAX_ROWS, more: str = ""):
    """The per-cell summary rows as a table: at most ``max_rows`` of them (None: all), in the store's label order,
    then a line of tallies over every row (complete, diverged, the quality gate) so that a cut table hides no
    count; ``more`` says how to print them all."""
    if not rows:
        console.print("(no cells)")
        return
    shown = rows if max_rows is None or len(rows) <= max_rows else rows[:max_rows]
    table = Table(title=title, caption="ridge dist: mean |x - proj|; conv: SCMS converged; rms e_N / e_T: "
                                        "normal / tangent model error; near: within 0.5 of a training point (the paper's count); "
                                        "memo: d1/d2 < 1/3; div: diverged; "
                                        "excess: held-out excess loss; degen: share of states whose ridge frame is "
                                        "numerically undetermined (masked in the averages)"
                                        + ("; quality: the sample-quality gate (docs/quality.md)"
                                           if "quality" in rows[0] else ""))
    keys = [k for k in rows[0] if k != "complete"]
    why = _why_empty(rows, keys, d)
    if why:
        table.caption += "; " + why
    table.add_column("done", no_wrap=True)
    for k in keys:
        table.add_column(_SHORT.get(k, k), justify="right", no_wrap=True)
    if len(shown) < len(rows):
        table.caption += (f"; the first {len(shown)} of {len(rows)} cells" + (f" ({more} prints every one)" if more
                                                                               else ""))
    for r in shown:
        cells = ["yes" if r["complete"] else "[red]no"]
        for k in keys:
            v = r[k]
            cells.append(f"{v:.3g}" if isinstance(v, float) else str(v))
        table.add_row(*cells)
    console.print(table)
    if len(shown) < len(rows):
        console.print(_tallies(rows), soft_wrap=True, highlight=False)


def _tallies(rows) -> str:
    """Counts over every summary row: complete cells, cells with a diverged sample, and each quality verdict."""
    from collections import Counter

    parts = [f"{sum(r['complete'] for r in rows)} of {len(rows)} cells complete",
             f"{sum(r.get('diverged', 0) > 0 for r in rows)} with a diverged sample"]
    if "quality" in rows[0]:
        parts.append("quality: " + ", ".join(f"{n} {v}" for v, n in Counter(r["quality"] for r in rows).most_common()))
    return "all cells: " + "; ".join(parts)


def _why_empty(rows, keys, d: int | None = None) -> str:
    """Why a column of complete cells reads nan (or near 0) in every row, for the caption ("" when none does):
    the masked geometry columns when every state's ridge frame is degenerate (image stores at d = 784, say);
    the paper's near-mode count at high dimension, where its radius of 0.5 data units is small."""
    done = [r for r in rows if r["complete"]]
    notes = []
    if d is not None and d >= 100 and "near_mode" in keys and done and all(r["near_mode"] == 0 for r in done):
        notes.append(f"near 0 in every cell: the paper's radius 0.5 is in data units, small beside the distances "
                     f"between points at d = {d} (docs/images.md)")
    empty = [k for k in keys if done and all(isinstance(r[k], float) and math.isnan(r[k]) for r in done)]
    masked = [k for k in empty if k in ("ridge_distance", "rms_residual_normal", "rms_residual_tangent")]
    if masked and "degenerate" in keys and all(r["degenerate"] == 1.0 for r in done):
        notes.insert(0, f"{' / '.join(_SHORT.get(k, k) for k in masked)} nan: every state's ridge frame is "
                        "degenerate (degen 1), and those states are masked")
    return "; ".join(notes)


#: width of the output when it is not a terminal and $COLUMNS is not set
PIPED_WIDTH = 140


def _output_width() -> int:
    """Columns to fit: ``$COLUMNS`` when set (also when the output is piped or captured), else the terminal's,
    else :data:`PIPED_WIDTH`."""
    import os

    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return console.width if sys.stdout.isatty() else PIPED_WIDTH


def _cut(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` characters: whole when it fits, else cut at a word boundary
    (or mid-word when the last word is long) and ended with an ellipsis.

    >>> _cut("Two training points (-3,0),(3,0).", 20), _cut("short", 20)
    ('Two training points…', 'short')
    """
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:max(width, 0)]
    head = text[:width - 1]
    space = head.rfind(" ")
    if text[width - 1] != " " and space >= 0.6 * (width - 1):  # mid-word: back to a boundary not too far back
        head = head[:space]
    return head.rstrip(" ,;:") + "…"


def _fitted_lines(rows: list[list[str]], width: int, header: list[str]) -> list[str]:
    """One line per row, columns separated by two spaces, none longer than ``width``: every column but the last
    at the width of its longest value (header included), the last cut to what is left (:func:`_cut`)."""
    rows = [header] + rows
    sizes = [max(len(r[k]) for r in rows) for k in range(len(header) - 1)]
    lead = sum(sizes) + 2 * len(sizes)
    out = []
    for r in rows:
        line = "".join(v.ljust(n + 2) for v, n in zip(r, sizes)) + _cut(r[-1], max(width - lead, 1))
        out.append(line if len(line) <= width else _cut(line, width))
    return out


@app.command("list")
def list_experiments(data_dir: str = _data_dir_option(), catalog: list[str] = _catalog_option(),
                     wide: bool = typer.Option(False, "--wide/--no-wide", metavar=FLAG, help="every field of every "
                                               "entry, whole (the description's first sentence, dataset, models, "
                                               "schedules, widths, samples, steps, d*, store): lines as wide as "
                                               "they need"),
                     estimate: bool = typer.Option(False, "--estimate/--no-estimate", metavar=FLAG, help="a time "
                                                   "column: the planner's total on 2 idle cores, as 'ridgexr run "
                                                   "--plan' (loads torch, and diffusers for the U-Net entries: "
                                                   "seconds)")):
    """List the catalogs' entries, one line each, fitted to the terminal ($COLUMNS, also when piped): the name and \
the first sentence of the description, cut with an ellipsis (the options print every field whole, or add the \
planner's time); then the stores of the data folder and the entry that made each (open one by that name, whatever \
catalog defined it)."""
    from .catalog import default_data_dir, describe, stores_in

    with user_errors():
        cat = _catalog(catalog, data_dir)
        stores = stores_in(data_dir)
        base = default_data_dir(data_dir)
    times = {n: _estimated_time(cat[n]) for n in cat} if estimate else {}
    if wide:
        _list_wide(cat, times, stores, base, data_dir)
        return
    width = _output_width()
    out = Console(width=width, soft_wrap=False, highlight=False, markup=False)
    say = lambda text: out.print(_wrapped(text, width))  # noqa: E731
    say(f"{len(cat)} experiments in {len(cat.files)} catalog file(s)")
    header = ["NAME"] + (["TIME"] if estimate else []) + ["DESCRIPTION"]
    rows = [[n] + ([times[n]] if estimate else []) + [describe(cat[n])["description"]] for n in cat]
    for line in _fitted_lines(rows, width, header):
        out.print(line)
    say(("TIME: the planner's total on 2 idle cores ('ridgexr run --plan NAME' gives its stages; measured error: "
         "docs/performance.md); ? where the training set's shape needs files that are not here. " if estimate
         else "--estimate adds the planner's time of each entry. ")
        + "--wide prints every field whole; 'ridgexr run --plan NAME' prints an entry's stages, memory and store size.")
    if not stores:
        say(f"no stores in the data folder {base}" + ("" if base.is_dir() else " (the folder does not exist)"))
        return
    say(f"{len(stores)} store(s) in the data folder {base}:")
    rows = [[str(p.relative_to(base)), entry or "(none recorded)", _store_source(cat, entry, p, data_dir)]
            for p, entry in stores.items()]
    for line in _fitted_lines(rows, width, ["STORE", "ENTRY", "CATALOG"]):
        out.print(line)
    say("ENTRY: the entry that made the store ('ridgexr info ENTRY' opens it, unless the entry now has another "
        "store); CATALOG: the file that defines the entry now ('not read': no catalog read here defines it)")


def _wrapped(text: str, width: int) -> str:
    """``text`` wrapped to ``width`` columns at spaces (a long word stays whole on its own line)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width=max(width, 20), break_long_words=False, break_on_hyphens=False))


def _store_source(cat, entry: str, path, data_dir) -> str:
    """The catalog file that defines a store's entry now, "not read", or where that entry's own store is."""
    from .catalog import resolve_store

    exp = cat.experiments.get(entry)
    if exp is None:
        return "not read"
    if resolve_store(exp, data_dir) == path:
        return str(exp.source)
    return f"{exp.source}, whose store for it is {exp.store}: open this one by its path"


def _list_wide(cat, times: dict, stores: dict, base, data_dir) -> None:
    """``ridgexr list --wide``: one line per entry and store, every value whole, however wide."""
    from rich.markup import escape

    from .catalog import describe

    out = Console(width=100_000)
    table = Table(title=f"experiments in {len(cat.files)} catalog file(s)", title_justify="left",
                  caption=("time: 'ridgexr run --plan NAME' on 2 idle cores (measured error: docs/performance.md); "
                           "? where the training set's shape is not known without its files" if times else ""),
                  caption_justify="left")
    rows = [describe(cat[n]) for n in cat]
    if times:  # beside the name
        rows = [{"name": r["name"], "time": times[r["name"]], **r} for r in rows]
    for k in rows[0] if rows else []:
        table.add_column(k, no_wrap=True)
    for r in rows:
        table.add_row(*[escape(str(v)) for v in r.values()])  # "[dsm, ideal]" is text, not markup
    out.print(table)
    if not stores:
        out.print(f"no stores in the data folder {base}" + ("" if base.is_dir() else " (the folder does not exist)"),
                  soft_wrap=True, highlight=False)
        return
    listed = Table(title=f"stores in the data folder {base}", title_justify="left", caption_justify="left",
                   caption="entry: the entry that made the store: 'ridgexr info ENTRY' opens it, unless the entry "
                           "now has another store; catalog: the file that defines the entry now ('not read': no "
                           "catalog read here, e.g. a file given once to 'ridgexr run')")
    for k in ("store", "entry", "catalog"):
        listed.add_column(k, no_wrap=True)
    for path, entry in stores.items():
        listed.add_row(str(path.relative_to(base)), entry or "(none recorded)", _store_source(cat, entry, path, data_dir))
    out.print(listed)


def _estimated_time(exp) -> str:
    """The planner's total time of an entry ("~8.3 s"; ``ridgexr run --plan`` adds the bound of every projection
    at ``ridge.max_iter``); "?" when its training set's shape needs files that are
    not here (an array file, a user's image folder), and "? (needs <module>)" when the estimate needs an optional
    dependency that is not installed (a unet block's cost counts its architecture with diffusers: the
    ``images`` extra)."""
    from .datasets import training_shape
    from .run.plan import estimate_stage_seconds, format_seconds

    try:
        shape = training_shape(exp.dataset, base_dir=exp.base_dir)
    except (OSError, ValueError):  # a missing or unreadable data file: the estimate needs its shape
        return "?"
    try:
        return "~" + format_seconds(sum(estimate_stage_seconds(exp, shape).values()))
    except ImportError as err:  # an optional extra is not installed: the listing goes on without this estimate
        return f"? (needs {err.name or 'an optional extra'})"


@app.command()
def info(store: str = typer.Argument(..., help="store path or catalog entry name"),
         data_dir: str = _data_dir_option(), catalog: list[str] = _catalog_option(),
         all_rows: bool = typer.Option(False, "--all-rows", help=f"print every cell's row (by default the first "
                                       f"{SUMMARY_MAX_ROWS}, with the tallies of all)")):
    """Describe a store: dims, variables, completed cells and provenance."""
    from .reader import check_complete_cells, summarize
    from .store.opening import json_attr

    with user_errors():
        path = _store(store, data_dir, catalog)
        ds = check_complete_cells(_open_store(path), path)  # warns of complete cells with missing chunks
        console.print(f"[bold]{ds.attrs.get('title', store)}[/]  schema {ds.attrs.get('schema_version')}")
        console.print("dims: " + ", ".join(f"{k}={v}" for k, v in ds.sizes.items()))
        console.print("variables: " + ", ".join(sorted(ds.data_vars)))
        prov = json_attr(ds, "provenance")
        console.print("provenance: " + ", ".join(f"{k}={v}" for k, v in prov.items()))
        done = int(ds["cell_complete"].sum())
        total = ds["cell_complete"].size
        run = int(ds["cell_applies"].sum()) if "cell_applies" in ds else total
        masked = f" ({total - run} masked: their model block does not use one of their labels)" if run < total else ""
        console.print(f"complete cells: {done} of {run}{masked}")
        ver = json_attr(ds, "verified")
        console.print("verified: " + (f"{ver['time']}, {ver['chunks_read']} chunks read, "
                                      f"{len(ver['damaged'])} damaged" + (" (repaired)" if ver.get("repaired") else "")
                                      if ver else "never ('ridgexr verify' checks every chunk)"))
        _summary_table(summarize(path, ds), "cells", d=ds.sizes.get("dim"),
                       max_rows=None if all_rows else SUMMARY_MAX_ROWS, more=f"ridgexr info {store} --all-rows")


def _store(name: str, data_dir, catalog_files):
    """The store path of an entry name or path (``FileNotFoundError`` says where it looked)."""
    from .reader import store_path
    from .store.lifecycle import damaged_root, interrupted
    from .catalog.folders import is_store

    # a store path needs no catalog (a broken catalog file does not stop `info ./x.zarr`); nor does one whose
    # --overwrite was interrupted between its renames (finished here) or whose root metadata is damaged (named)
    if is_store(name) or interrupted(name) or damaged_root(name):
        return store_path(name)
    cat = _catalog(catalog_files, data_dir)
    if not cat.skipped:  # (with a skipped catalog file, the name may be one of its entries: store_path says so)
        _refuse_unknown_name(name, cat, data_dir)
    return store_path(name, data_dir=data_dir, catalog=cat)


def _refuse_unknown_name(name: str, cat, data_dir) -> None:
    """Raise one line (``FileNotFoundError``) for a name that can open no store: the data folder when it does
    not exist, and the closest entry or store name ("did you mean"), instead of a list of every entry.  Returns
    when the name may open one (a path that exists, an entry, the entry a store of the data folder records):
    :func:`ridgexr.reader.store_path` then opens it or says why not."""
    import difflib
    from pathlib import Path

    from .catalog import data_dir_source, default_data_dir, resolve_store, stores_in, stores_named

    base = default_data_dir(data_dir)
    folder = f"the data folder {str(base)!r} (from {data_dir_source(data_dir)})"
    if not base.is_dir() and name in cat.experiments:
        raise FileNotFoundError(f"no ridgexr store for {name!r} at {str(resolve_store(cat[name], data_dir))!r}: "
                                f"{folder} does not exist; run 'ridgexr run {name}' first, or point to the folder "
                                "that holds the stores with --data-dir DIR or $RIDGEXR_DATA")
    if name in cat.experiments or Path(name).exists() or (base.is_dir() and stores_named(name, data_dir)):
        return
    stores = stores_in(data_dir)  # {} when the folder does not exist
    names = list(cat.experiments) + [e for e in stores.values() if e] + [
        str(p.relative_to(base)).removesuffix(".zarr") for p in stores]
    close = difflib.get_close_matches(name, list(dict.fromkeys(names)), n=1)
    raise FileNotFoundError(
        f"{name!r} is neither a ridgexr store nor a catalog entry nor the entry of a store in {folder}"
        + ("" if base.is_dir() else ", which does not exist")
        + (f"; did you mean {close[0]!r}?" if close else "")
        + " ('ridgexr list' lists the entries and the stores)")


def _open_store(path):
    from .store.opening import open_store

    return open_store(path)


@app.command()
def analyze(
    name: str = typer.Argument(..., help="store path or catalog entry name"),
    scheduler: str = typer.Option(None, "--scheduler", help="'local' (LocalCluster of processes) or an address"),
    workers: int = typer.Option(2, "--workers", min=1),
    r: float = typer.Option(0.5, "--r", min=0.0, help="tube radius for reach times and mode counts"),
    data_dir: str = _data_dir_option(),
    catalog: list[str] = _catalog_option(),
):
    """Print phase times, spread, mode counts and memorization fraction per cell.

    Cells not finished yet (a store being written, or an interrupted run) are shown as missing, \
and the count of them is printed; rows follow the store's label order."""
    from contextlib import nullcontext

    from . import analysis
    from .reader import check_complete_cells
    from .run import check_scheduler, dask_client
    from .schema import CELL_DIMS

    with user_errors():
        path = _store(name, data_dir, catalog)
        ds = check_complete_cells(_open_store(path), path)  # a complete cell missing a chunk: incomplete, warned
        check_scheduler(scheduler)
        with dask_client(scheduler, workers) if scheduler else nullcontext():
            t0 = time.perf_counter()
            with _dask_progress(scheduler), warnings.catch_warnings():
                # unfinished cells hold only NaN (their reductions warn "All-NaN slice"): they are masked below
                warnings.simplefilter("ignore", RuntimeWarning)
                table = analysis.summary_table(ds, r=r).compute()
            elapsed = time.perf_counter() - t0
    import xarray as xr

    done = ds["cell_complete"].astype(bool).compute()
    applies = ds["cell_applies"].astype(bool).compute() if "cell_applies" in ds else xr.ones_like(done)
    labels = [d for d in CELL_DIMS if d in done.dims]  # in store order: model, schedule, width, ...
    # rows in the order of the store's labels, whatever order the variables were listed in
    frame = table.assign(complete=done, applies=applies).transpose(*labels)
    df = frame.to_dataframe(dim_order=labels).reset_index()
    df = df[df.pop("applies")]  # masked cells (a model block that does not use a label) are never run: no row
    shares = [v for v in table.data_vars if f"{v}_low" in table.data_vars]  # shown as "share [low, high]"
    values = [v for v in table.data_vars if v not in shares and not v.endswith(("_low", "_high"))]
    rich_table = Table(title=f"{ds.attrs.get('experiment', name)}: analyses (r = {r})",
                       caption="near mode: within r of a training point (the paper's count); memorized: d1/d2 < 1/3; "
                               "[95% Wilson interval]; missing: the cell is not finished")
    for c in labels + values + shares:
        rich_table.add_column(c.replace("_", " "), justify="right", no_wrap=c in shares or c in labels)
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)  # noqa: E731
    for _, row in df.iterrows():
        if not row["complete"]:
            rich_table.add_row(*[fmt(row[c]) for c in labels], *["[red]missing"] * (len(values) + len(shares)))
            continue
        rich_table.add_row(*[fmt(row[c]) for c in labels + values],
                           *[f"{row[c]:.2f} [{row[c + '_low']:.2f}, {row[c + '_high']:.2f}]" for c in shares])
    console.print(rich_table)
    unfinished = int((~df["complete"].astype(bool)).sum())
    if unfinished:
        err_console.print(f"[yellow]warning:[/] {unfinished} of {len(df)} cells are not finished (shown as missing): "
                          "the store is being written, or its run was interrupted ('ridgexr run' resumes it)",
                          soft_wrap=True, highlight=False)
    console.print(f"computed in {elapsed:.1f} s{' on ' + scheduler if scheduler else ''}")


@app.command()
def claims(
    name: str = typer.Argument(..., help="store path or catalog entry name"),
    markdown: bool = typer.Option(False, "--markdown/--table", help="print a Markdown table (for the docs)"),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="keep the forward references beside the store "
                               "(STORE.claims-cache), read them from there and resume them (docs/claims.md)"),
    data_dir: str = _data_dir_option(),
    catalog: list[str] = _catalog_option(),
):
    """Print the claims the store's entry makes, each with its criterion, interval, null and verdict.

    Each claim's measure, reference, null and criterion are fixed by its kind (the claims registry, \
docs/claims.md) and the entry's claims: block; the verdicts are computed from the store, never pasted."""
    from .claims import claim_specs, claims_table, store_claims
    from .reader import check_complete_cells
    from .verdicts import CRITERION_COLUMN, claims_frame

    with _stop_signals(), user_errors():
        path = _store(name, data_dir, catalog)
        ds = check_complete_cells(_open_store(path), path)
        with _progress(err_console) as progress:  # on stderr: the table (or Markdown) alone on stdout
            if markdown:
                text = claims_table(ds, cache=cache, progress=progress)
            else:
                specs, source = claim_specs(ds)
                found = store_claims(ds, specs, cache=cache, progress=progress)
        _raise_if_interrupted()
        if markdown:
            console.print(text, soft_wrap=True, highlight=False, markup=False)
            return
    if not found:
        console.print(f"no claims: {source}", highlight=False)
        return
    frame = claims_frame(found)  # every claim's labels as columns (align's t, a kind's own labels), "" where absent
    rows = frame.astype(object).where(frame.notna(), "").to_dict("records")
    # one table per statement (the claim and its times), one row per cell: the statement is said once, not per row
    columns = [c for c in rows[0] if c not in ("claim", "measure", CRITERION_COLUMN, "null from")]
    colour = {"agrees": "green", "disagrees": "red", "inconclusive": "yellow"}
    console.print(f"[bold]{ds.attrs.get('experiment', name)}: claims[/] ({source})", highlight=False)
    for statement in dict.fromkeys(r["claim"] for r in rows):
        mine = [r for r in rows if r["claim"] == statement]
        # a label no row of this claim has, and a gate no cell's quality could assess: left out
        shown = [c for c in columns if any(str(r[c]) not in ("", "not assessed") for r in mine)]
        table = Table(title=statement, title_justify="left")
        for c in shown:
            table.add_column(c, overflow="fold", justify="left" if c in ("verdict", "note", "gate") else "right")
        for row in mine:
            table.add_row(*[f"[{colour.get(row[c], 'default')}]{row[c]}" if c == "verdict" else str(row[c])
                            for c in shown])
        console.print(table)
    for r in {r[CRITERION_COLUMN]: r for r in rows}.values():  # each kind's criterion and null, once
        console.print(f"- {r['measure']}: {r[CRITERION_COLUMN]}"
                      + (f"; null: {r['null from']}" if r["null from"] else ""), soft_wrap=True, highlight=False)


@app.command()
def report(
    name: str = typer.Argument(..., help="store path or catalog entry name"),
    out: str = typer.Option(None, "--out", help="output directory (default: <store>.report)"),
    n_frames: int = typer.Option(defaults.REPORT_N_FRAMES, "--n-frames", min=1, help="snapshots (steps) in the "
                                 "grid of the 2-D sample figure (make_report's default); 'ridgexr explore' has a "
                                 "slider over every step"),
    data_dir: str = _data_dir_option(),
    catalog: list[str] = _catalog_option(),
):
    """Write PNG figures and one self-contained HTML report (bokeh figures; 'ridgexr explore' is the interactive view)."""
    from pathlib import Path

    from .report import make_report

    with user_errors():
        path = _store(name, data_dir, catalog)
        ds = _open_store(path)
        target = Path(out) if out else Path(str(path).rstrip("/") + ".report")
        with console.status("rendering figures"):
            paths = make_report(ds, target, title=str(ds.attrs.get("title", name)), n_frames=n_frames)
    for k, p in paths.items():
        console.print(f"{k}: {p}")


@app.command()
def explore(
    name: str = typer.Argument(..., help="store path or catalog entry name"),
    port: int = typer.Option(0, "--port", min=0, max=65535, help="port (0: a free one)"),
    address: str = typer.Option("127.0.0.1", "--address", help="address to listen on: 127.0.0.1 (this machine only; "
                                "the default) or another, e.g. 0.0.0.0 (every interface: whoever reaches the machine "
                                "reads the store)"),
    show: bool = typer.Option(True, "--show/--no-show", metavar=FLAG, help="open the explorer in a browser tab"),
    max_samples: int = typer.Option(256, "--max-samples", min=1, help="samples drawn per frame"),
    data_dir: str = _data_dir_option(),
    catalog: list[str] = _catalog_option(),
):
    """Serve an interactive explorer of a store (cell widgets, a t slider, samples, ridge distance curves)."""
    with user_errors():
        path = _store(name, data_dir, catalog)
        ds = _open_store(path)
        from .explore import ExplorerData, free_port, serve

        ExplorerData(ds, max_samples)  # refuses a dataset that is not a store before serving
        port = port or free_port(address or "0.0.0.0")
    host = address if address not in ("", "0.0.0.0", "::") else "127.0.0.1"
    console.print(f"explorer of {path} at http://{'[' + host + ']' if ':' in host else host}:{port}/ (Ctrl-C stops)",
                  soft_wrap=True)
    serve(ds, port=port, show=show, title=f"ridgexr explore {ds.attrs.get('experiment', name)}",
          max_samples=max_samples, address=address)


@app.command()
def verify(
    store: str = typer.Argument(..., help="store path or catalog entry name"),
    repair: bool = typer.Option(False, "--repair/--no-repair", metavar=FLAG, help="rewrite damaged metadata from "
                                "the record kept at the store's creation (or its configuration's schema), keeping "
                                "every chunk that verifies; restore what was written at creation from its intact "
                                "copy; clear the completion marks of damaged cells so that 'ridgexr run' "
                                "recomputes exactly them"),
    resolve_config: str = typer.Option(None, "--resolve-config", help="when the configuration disagrees with its "
                                       "hash or the record of the store's creation: 'creation' restores the "
                                       "recorded one, 'current' keeps the current one and rehashes it (both then "
                                       "repair the rest)"),
    data_dir: str = _data_dir_option(),
    catalog: list[str] = _catalog_option(),
):
    """Check the store against the record of its creation (or its configuration's schema), read every chunk of \
every complete cell and check its digest; report damaged (variable, cell) pairs (exit 1 when any)."""
    from rich.markup import escape

    from .run.verification import verify as verify_against_schema

    with user_errors():  # one call: recovery (its notes warned), checks, repair, every chunk read
        report = verify_against_schema(_store(store, data_dir, catalog), repair=repair, resolution=resolve_config)
    for note in report.resolved:
        console.print(f"resolved: {escape(note)}", soft_wrap=True, highlight=False)
    damage = report.schema + report.damage
    for d in damage:
        console.print(f"[red]damaged:[/] {escape(str(d))}", soft_wrap=True, highlight=False)
    if report.read_only:
        console.print("read-only: the store cannot be written (no lock file was needed to read it); the result is "
                      "not recorded in it", soft_wrap=True, highlight=False)
    if not damage:
        console.print(f"ok: the metadata match the {'record kept at creation' if report.record else 'configuration' + chr(39) + 's schema'}; "
                      f"{report.n_read} chunks read, every checksum and cell digest matches, no complete cell misses "
                      "a chunk", soft_wrap=True, highlight=False)
        return
    if report.rewritten:
        console.print(f"repaired: rewrote {', '.join(report.rewritten)} from the "
                      f"{'record kept at creation' if report.record else 'configuration'} (every chunk that verifies "
                      "kept)", soft_wrap=True, highlight=False)
    if report.mended:
        console.print(f"repaired: the record's copy of {len(report.mended)} chunk file(s) rewritten from the store's "
                      "own, which match the record", soft_wrap=True, highlight=False)
    if report.restored:
        console.print(f"repaired: {len(report.restored)} cell(s) whose completion mark was lost are complete again "
                      "(their digest verifies)", soft_wrap=True, highlight=False)
    if report.cells and (repair or resolve_config):
        console.print(f"repaired: {len(report.cells)} cell(s) marked incomplete; run 'ridgexr run' on this entry to "
                      "recompute them", soft_wrap=True, highlight=False)
    if report.identity and report.refused:
        console.print("[red]not repaired:[/] nothing is rewritten while the configuration is in doubt: choose with "
                      "--resolve-config (above)", soft_wrap=True, highlight=False)
    for d in [d for d in report.refused if d.kind != "identity"]:
        console.print(f"[red]not repaired:[/] {escape(str(d))}: no intact copy to restore it from (it is never "
                      "rebuilt from fill values); rerun the entry with --overwrite", soft_wrap=True, highlight=False)
    if report.schema and not (repair or resolve_config) and not report.identity:
        console.print("the metadata or what was written at creation differ from the store's schema: 'ridgexr verify "
                      "--repair' rewrites the metadata and restores the rest from intact copies", soft_wrap=True,
                      highlight=False)
    restorable = {d.variable for d in report.schema if d.kind == "file"} - {d.variable for d in report.refused}
    if [d for d in report.whole if d.variable not in restorable]:
        console.print("store-level arrays are damaged; they cannot be recomputed cell by cell: rerun with --overwrite",
                      soft_wrap=True, highlight=False)
    raise typer.Exit(1)


def _print_version(value: bool):
    if value:
        from ._version import __version__

        typer.echo(f"ridgexr {__version__}")
        raise typer.Exit()


@app.callback()
def main(debug: bool = typer.Option(False, "--debug/--no-debug", metavar=FLAG, help="show Python tracebacks for errors"),
         version: bool = typer.Option(False, "--version", metavar=FLAG, callback=_print_version, is_eager=True,
                                      help="print the version and exit")):
    """ridgexr command-line interface (imports torch only for commands that compute)."""
    _STATE["debug"] = debug
    warnings.showwarning = _show_warning


if __name__ == "__main__":
    app()
