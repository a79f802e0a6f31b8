"""``make demo`` / ``txstore demo``: the main job (see :func:`txstore.demo.main.main`).

May import every package but ``txstore.cli`` (which imports it); PySpark and matplotlib only
inside the functions that use them. :mod:`txstore.demo.child` (the child processes) is not
imported by this package.
"""

from __future__ import annotations

from txstore.demo.main import main

__all__ = ["main"]
