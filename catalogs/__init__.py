"""The built-in experiment catalogs (YAML), installed as the package data ``ridgexr.catalogs``.

The YAML files live in the repository's top-level ``catalogs/`` folder; ``pyproject.toml``
maps that folder to the ``ridgexr.catalogs`` package, so an editable install and a wheel
both read them with ``importlib.resources.files("ridgexr.catalogs")``.
"""
