"""Sphinx configuration: pydata-sphinx-theme, MyST pages, numpydoc API pages, the tutorial executed by myst-nb.

Build (warnings are errors):  sphinx-build -W -b html docs docs/_build/html
``tests/test_docs.py`` runs exactly this build in the test suite, on a copy of docs/.  The tutorial is
executed against a small store that this file creates under ``docs/_build/tutorial-store`` from
``docs/tutorial.yaml`` (no sample diverges, memorization varies with schedule and width), so the
built page shows real outputs; it runs in a temporary working folder, so the
files it writes (a figure, ``slice.nc``, a scratch store) never land in docs/.  With
``RIDGEXR_DOCS_KEEP_TUTORIAL_FILES=1`` it runs in the source folder instead, and those files stay beside the
notebook: the test suite builds a copy of docs/ that way and checks them, so the tutorial executes once.
"""

import os
import sys
from pathlib import Path

import ridgexr

HERE = Path(__file__).resolve().parent

project = "ridgexr"
author = "the ridgexr developers"
copyright = "2026, the ridgexr developers"
release = ridgexr.__version__
version = release

extensions = [
    "myst_nb",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "generated/*.md", "claims_tables/*.md", "quality_tables/*.md", "tables/*.md", "**.ipynb_checkpoints", "figures"]
root_doc = "index"
html_theme = "pydata_sphinx_theme"
html_title = f"ridgexr {release}"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
# every page in the left sidebar: the theme's own sidebar lists only the pages below the current top-level
# page, and all of ours are top level (one flat toctree in index.md), so it was empty
templates_path = ["_templates"]
html_sidebars = {"**": ["sidebar-pages"]}

autosummary_generate = True
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()
myst_heading_anchors = 3
# mystnb.unknown_mime_type: holoviews/panel give every notebook output an extra
# application/vnd.holoviews_exec.v0+json (and the extension's load an ..._load.v0+json) entry for a live
# kernel's comms; myst-nb parses every entry of a bundle and warns on these, then renders the bundle's
# text/html and application/javascript. The plots render because the tutorial loads BokehJS inline
# (hv.extension(..., inline=True)); tests/test_docs.py opens the built tutorial in Chromium and counts them.
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type"]

nb_execution_mode = "force"
nb_execution_timeout = 600
nb_execution_raise_on_error = True
# the tutorial writes a figure, a netCDF slice and a store into its working folder
nb_execution_in_temp = os.environ.get("RIDGEXR_DOCS_KEEP_TUTORIAL_FILES", "") != "1"


def _tutorial_store() -> str:
    """The tutorial's store: the entry of docs/tutorial.yaml (the demo's model and training at two widths,
    60 steps, 64 samples; rebuilt when missing or written by another configuration)."""
    from ridgexr.catalog import experiment_from_file
    from ridgexr.run import ConfigMismatchError, run_experiment

    folder = HERE / "_build" / "tutorial-store"
    folder.mkdir(parents=True, exist_ok=True)
    catalog = folder / "tutorial.yaml"  # docs/tutorial.yaml; tests/test_docs.py checks the store it gives
    catalog.write_text((HERE / "tutorial.yaml").read_text())
    exp = experiment_from_file(catalog)
    try:
        return str(run_experiment(exp, data_dir=folder).store)
    except ConfigMismatchError:  # a build folder left by an older ridgexr: replace its store
        return str(run_experiment(exp, data_dir=folder, overwrite=True).store)


os.environ.setdefault("RIDGEXR_TUTORIAL_STORE", _tutorial_store())
sys.path.insert(0, str(HERE.parent))
