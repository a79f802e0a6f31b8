"""Spark's automatic registration of the ``txstore`` data source.

PySpark (4.0+) looks for top-level modules named ``pyspark_*`` on its workers' path when a
session first uses a Python data source, and registers the ``DefaultSource`` class of each
(``pyspark/sql/worker/lookup_data_sources.py``). Installing txstore installs this package, so
``spark.read.format("txstore")`` works in any session whose Python workers run this environment,
with no import and no :func:`txstore.spark.register` call. (``txstore-metadata`` still needs
``register``: Spark takes one ``DefaultSource`` per module.)

Spark imports every ``pyspark_*`` module in one go, so an ``ImportError`` here would hide the
other packages' sources too: without the ``spark`` extra's dependencies (pyarrow) in the
workers' environment, this module defines no ``DefaultSource`` and Spark skips it.
"""

import contextlib
from typing import Any

DefaultSource: Any
with contextlib.suppress(ImportError):  # no spark extra: nothing to register
    from txstore.spark.datasource import TxStoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
