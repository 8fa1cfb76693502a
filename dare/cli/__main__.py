"""``python -m dare.cli``: the ``dare`` command."""

from dare.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
