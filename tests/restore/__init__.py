"""Tests of the sorted restore (txstore.bytestores.restore_runs, txstore.runtime.restore_sorted)."""
