"""Tests of txstore.queries."""
