"""Tests of the txstore command line (txstore.cli)."""
