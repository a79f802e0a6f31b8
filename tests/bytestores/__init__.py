"""Tests of txstore.bytestores."""
