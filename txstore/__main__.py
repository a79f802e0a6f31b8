"""``python -m txstore``: the command line (:mod:`txstore.cli.main`)."""

from txstore.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
