"""The HTTP query service and its clients: protocol, JSON wire forms, paging, the endpoints
(``service``), the ASGI application (``asgi``, Starlette), its uvicorn server (``server``), and
the clients' flows (``routing``, ``flows``) driven over httpx (``transport``, ``client``,
``aclient``).

May import: ``txstore.queries`` and below; the rest of ``txstore.queries`` never imports it.
"""

from __future__ import annotations

from txstore.queries.http.aclient import AsyncQueryClient
from txstore.queries.http.asgi import asgi_app
from txstore.queries.http.client import QueryClient
from txstore.queries.http.server import QueryServer

__all__ = ["AsyncQueryClient", "QueryClient", "QueryServer", "asgi_app"]
