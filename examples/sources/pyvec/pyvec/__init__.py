"""Example bindings: dot products through the vecmath C library, and the HIP library hipvec."""
from ._vecmath import dot, hipvec_info

__all__ = ["dot", "hipvec_info"]
