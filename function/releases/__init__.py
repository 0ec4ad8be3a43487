"""Flower releases: what differs from one release to the next, one row per release."""
