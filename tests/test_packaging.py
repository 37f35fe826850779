"""The wheel holds every package of the source tree and the built-in catalogs (a non-editable install works)."""

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_packages_list_names_every_package_of_the_source_tree():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "ridgexr").rglob("__init__.py")}
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages in pyproject.toml"
    assert config["package-dir"]["ridgexr.catalogs"] == "catalogs"


@pytest.mark.slow
def test_wheel_contains_the_code_and_the_catalogs(tmp_path):
    # built from a copy of what the build reads: pip builds in place, and setuptools writes build/ and
    # ridgexr.egg-info/ beside the sources
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("ridgexr", "catalogs"):
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(src)], check=True, capture_output=True)
    wheel = next(wheels.glob("ridgexr-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"ridgexr/catalogs/points2d.yaml", "ridgexr/catalogs/mnist.yaml", "ridgexr/catalogs/__init__.py",
            "ridgexr/run/experiment.py", "ridgexr/training/fit.py", "ridgexr/cli.py"} <= names
    assert not any(n.startswith(("tests/", "catalogs/", "benchmarks/")) for n in names)
