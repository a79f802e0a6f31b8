"""The end-to-end demo (work in progress: see main())."""

from __future__ import annotations

import sys

from txstore.demo.codec_checks import run_codec_demo


def main(argv: list[str] | None = None) -> int:
    failed = run_codec_demo()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
