"""txstore as a Spark data source (the ``spark`` extra: PySpark >= 4.0, pyarrow, and Java 17;
from a clone, ``pip install '.[spark]'``).

::

    import txstore.spark

    spark = txstore.spark.local_session()  # or any session, then txstore.spark.register(spark)
    df = spark.read.format("txstore").option("store", "users").load("/var/lib/app/state")

Installing txstore also installs the top-level ``pyspark_txstore`` package, which PySpark's
discovery of ``pyspark_*`` modules registers: ``format("txstore")`` then works with no import,
in any session whose Python workers run this environment. :func:`local_session`
(:mod:`txstore.spark.session`) starts a local session with the right worker Python.

Two sources, registered per Spark session by :func:`register`:

* ``txstore``: the committed rows of one store (key-value, window or session) across partitions
  (:class:`~txstore.spark.datasource.TxStoreDataSource`; options in
  :mod:`txstore.spark.options`, columns in :mod:`txstore.spark.schema`, the consistency
  guarantee in :mod:`txstore.spark.plan`);
* ``txstore-metadata``: one row per store.

``import txstore`` never imports this package or PySpark; importing this package does not
import PySpark either until :func:`register` (or a data source class) is used, so the option
parsing and planning code is usable without it.

May import: ``txstore.runtime`` and below; PySpark and pyarrow in the modules that need them
(``datasource``, ``reader``, ``schema``), which this ``__init__`` imports on first use only.
Never ``txstore.queries`` or ``txstore.crashtest``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from txstore.spark.datasource import TxStoreDataSource, TxStoreMetadataDataSource

__all__ = [
    "METADATA_SOURCE_NAME",
    "SOURCE_NAME",
    "JavaNotFoundError",
    "TxStoreDataSource",
    "TxStoreMetadataDataSource",
    "local_session",
    "register",
]

SOURCE_NAME = "txstore"
METADATA_SOURCE_NAME = "txstore-metadata"

_MISSING = (
    "txstore.spark needs the spark extra (PySpark >= 4.0 and pyarrow): pip install '.[spark]' "
    "from a clone of txstore ({exc})"
)


def _datasource() -> Any:
    try:
        from txstore.spark import datasource
    except ImportError as exc:
        raise ImportError(_MISSING.format(exc=exc)) from exc
    return datasource


def register(spark: Any) -> None:
    """Register the ``txstore`` and ``txstore-metadata`` sources with the session ``spark``.

    Registration is per session (call it again for a new session); installing txstore makes
    ``spark.read.format("txstore")`` work without it (the ``pyspark_txstore`` package, which
    Spark discovers). This also enables Python data source filter pushdown for the session
    (``spark.sql.python.filterPushdown.enabled``), which key lookups use. In a local session
    whose workers would start Spark's default ``python3`` (``PYSPARK_PYTHON`` unset), the
    sources' workers run this interpreter (:func:`txstore.spark.session.worker_python`), so they
    import the txstore of this environment; other Python code of the session is left alone.
    """
    ds = _datasource()
    from txstore.spark.session import worker_python

    try:
        context: Any = spark.sparkContext
    except Exception:  # Spark Connect has none (PySparkNotImplementedError): nothing to set
        context = None
    saved = getattr(context, "pythonExec", None)
    python = worker_python(str(context.master)) if context is not None else None
    try:
        if python is not None:
            context.pythonExec = python  # captured by each registered source for its workers
        spark.dataSource.register(ds.TxStoreDataSource)
        spark.dataSource.register(ds.TxStoreMetadataDataSource)
    finally:
        if saved is not None:
            context.pythonExec = saved
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def __getattr__(name: str) -> Any:
    if name in ("JavaNotFoundError", "local_session"):
        from txstore.spark import session

        return getattr(session, name)
    if name in ("TxStoreDataSource", "TxStoreMetadataDataSource"):
        return getattr(_datasource(), name)
    raise AttributeError(f"module 'txstore.spark' has no attribute {name!r}")
