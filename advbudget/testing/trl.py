"""Kept for earlier imports: a re-export of :mod:`advbudget.adapters.trl.testing`."""

from advbudget.adapters.trl.testing import *  # noqa: F403
