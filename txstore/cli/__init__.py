"""The ``txstore`` command line: one module per group of commands, dispatched by
:mod:`txstore.cli.main`.

May import every other package; nothing imports it (but ``txstore.__main__``).
"""
