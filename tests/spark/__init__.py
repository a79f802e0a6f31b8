"""Tests of txstore.spark."""
