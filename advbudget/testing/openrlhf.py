"""Kept for earlier imports: a re-export of :mod:`advbudget.adapters.openrlhf.testing`."""

from advbudget.adapters.openrlhf.testing import *  # noqa: F403
