"""Byte stores: key-value and segmented (window, session) stores of ``bytes`` over a partition,
with key schemas, retention, format adapters and lazy format upgrades.

May import: ``txstore.engine`` and what it may import.
"""
