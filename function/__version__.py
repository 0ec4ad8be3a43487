"""The function's version, read by the wheel build (hatch) and the image tag."""

__version__ = "0.1.0"
