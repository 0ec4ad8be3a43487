"""A Flower app that checks a Federation end to end, with nothing to download."""
