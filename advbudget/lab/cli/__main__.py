"""``python -m advbudget.lab.cli``: the ``advbudget`` command without the console script."""

from . import main

if __name__ == "__main__":  # pytest's doctest collection imports this module too
    main()
