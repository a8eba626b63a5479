"""`python -m gelulab`: the command line (gelulab.cli).

entry() is the command line with its own import inside: a Ctrl-C while gelulab.cli is being imported (before its
main() has put the interrupt handlers in place) is the same one line and exit 130 as once the command runs,
instead of Python's KeyboardInterrupt traceback.
"""
import sys


def entry() -> int:
    """Import gelulab.cli and run its main(); returns the exit code (130 for a Ctrl-C during the import)."""
    try:
        from gelulab.cli import main
    except KeyboardInterrupt:
        print("gelulab: interrupted before the command started; nothing was written", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(entry())
