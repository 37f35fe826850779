"""The installed package's version, read from its metadata (on the lowest floor, so every module may read it)."""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("ridgexr")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0+unknown"
