"""The version of txstore (one place; ``txstore.__version__`` re-exports it)."""

__version__ = "0.1.0"
