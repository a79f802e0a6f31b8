"""Tests of txstore.codecs."""
