"""Tests of txstore.engine."""
