"""``python -m ridgexr``: the command-line interface (the same as the ``ridgexr`` command)."""

from .cli import app

if __name__ == "__main__":
    app(prog_name="ridgexr")
