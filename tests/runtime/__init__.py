"""Tests of txstore.runtime."""
