"""The HTTP query service and its client: protocol, JSON wire forms, paging, server, routing
client.

May import: ``txstore.queries`` and below; the rest of ``txstore.queries`` never imports it.
"""
