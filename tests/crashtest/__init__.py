"""Tests of txstore.crashtest."""
