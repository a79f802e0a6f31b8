"""The ``txstore`` command line (also ``python -m txstore``)."""

from __future__ import annotations

import argparse
import sys


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="txstore", description="Embedded transactional state store (Kafka Streams on LMDB)."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the main demo job (codec checks against Kafka's vectors)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``txstore`` command; returns the process exit code."""
    args = _build_parser().parse_args(argv)
    if args.command == "demo":
        from txstore.demo import main as demo_main

        return demo_main()
    return 2  # pragma: no cover - argparse rejects unknown commands first


if __name__ == "__main__":
    sys.exit(main())
