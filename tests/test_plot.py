"""ridgexr.plot leaves the user's global plotting state alone."""

import json
import os
import subprocess
import sys

SCRIPT = """
import json, matplotlib, holoviews as hv
before = [matplotlib.get_backend(), hv.Store.current_backend]
import ridgexr.plot as plot
after_import = [matplotlib.get_backend(), hv.Store.current_backend]
curve = plot.both(hv.Curve([(0, 1), (1, 3)]), title="x")  # loads both renderers, sets options on both
opts = [hv.Store.lookup_options(b, curve, "plot").kwargs.get("title") for b in ("bokeh", "matplotlib")]
after_use = [matplotlib.get_backend(), hv.Store.current_backend]
print(json.dumps([before, after_import, after_use, sorted(hv.Store.renderers), opts]))
"""


def test_importing_and_using_plot_keeps_matplotlibs_and_holoviews_backends():
    env = {**os.environ, "MPLBACKEND": "svg"}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    before, after_import, after_use, renderers, opts = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == ["svg", "matplotlib"]
    assert after_import == before and after_use == before
    assert renderers == ["bokeh", "matplotlib"] and opts == ["x", "x"]  # the options still reach both backends
