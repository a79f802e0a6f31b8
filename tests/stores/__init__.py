"""Tests of txstore.stores."""
