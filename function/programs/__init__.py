"""Programs that run inside the pods the function composes, not in the function.

Standard library only (and, where a Flower image has it, `cryptography` and
Flower's own CLI): a builder ships them to the pods as one archive
(function/builders/identity.py) holding this package's modules at their paths
and __main__.py, which the pods run with their image's Python. They import
nothing of the function but each other's shared plumbing (flwr_control.py).
The function imports them only to share their names and formats (a
ConfigMap's name, a file's layout) with what it composes.
"""
