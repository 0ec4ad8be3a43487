"""A Crossplane composition function that deploys Flower federations."""
