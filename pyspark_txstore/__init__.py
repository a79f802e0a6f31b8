"""Spark's automatic registration of the ``txstore`` data source.

PySpark (4.0+) looks for top-level modules named ``pyspark_*`` on its workers' path when a
session first uses a Python data source, and registers the ``DefaultSource`` class of each
(``pyspark/sql/worker/lookup_data_sources.py``). Installing txstore installs this package, so
``spark.read.format("txstore")`` works in any session whose Python workers run this environment,
with no import and no :func:`txstore.spark.register` call. (``txstore-metadata`` still needs
``register``: Spark takes one ``DefaultSource`` per module.)
"""

from txstore.spark.datasource import TxStoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
