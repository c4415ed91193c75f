"""``python -m advbudget.adapters.skyrl <SkyRL's key=value overrides>``: SkyRL's training
with advbudget's estimators and step features (:mod:`._trainer`)."""

from advbudget.adapters.skyrl import main

if __name__ == "__main__":
    main()
