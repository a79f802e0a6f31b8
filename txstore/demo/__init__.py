"""``make demo`` / ``txstore demo``: the main job (see :func:`txstore.demo.main.main`)."""

from __future__ import annotations

from txstore.demo.main import main

__all__ = ["main"]
