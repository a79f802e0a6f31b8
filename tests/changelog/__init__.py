"""Tests of txstore.changelog."""
