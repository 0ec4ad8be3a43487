"""Programs that run inside the pods the function composes, not in the function.

Each is a single module of standard library (and, where a Flower image has it,
`cryptography` and Flower's own CLI), with no import of this package: a builder
ships its source to the pods (function/builders/identity.py zips
identity_program.py into a ConfigMap the pods run with their image's Python).
The function imports them only to share their names and formats (a
ConfigMap's name, a file's layout) with what it composes.
"""
