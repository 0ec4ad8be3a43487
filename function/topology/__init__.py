"""Where pools land: the clusters a Federation selects and where each pool is placed."""
