"""The API: the Federation model (the XRD is generated from it), its cross-field rules and every refusal.

The bottom layer: it imports nothing else of the function but function.caching.
"""
