"""``python -m sweeper`` and the ``sweeper`` console script."""

import sys


def _run() -> int:
    """Ctrl-C at any moment, sweeper's own imports included, is one line and exit 130."""
    try:
        from sweeper.front.cli import main

        return main()
    except KeyboardInterrupt:
        try:  # what an earlier run of this sweep left in a cluster's queue ends too
            from sweeper.front.cli import abandon_early

            abandon_early(sys.argv[1:])
        except BaseException:
            pass
        print("sweeper: interrupted; finished trials are kept: run the same command again to resume",
              file=sys.stderr)
        return 130


def entry() -> None:
    """The ``sweeper`` console script."""
    sys.exit(_run())


if __name__ == "__main__":
    entry()
