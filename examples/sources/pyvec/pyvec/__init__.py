"""Example bindings: dot products through the vecmath C library."""
from ._vecmath import dot

__all__ = ["dot"]
