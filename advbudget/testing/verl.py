"""Kept for earlier imports: a re-export of :mod:`advbudget.adapters.verl.testing`."""

from advbudget.adapters.verl.testing import *  # noqa: F403
