import os
from setuptools import Extension, setup

prefix = os.environ.get("ROCM_PATH", "/opt/rocm")
setup(
    name="pyvec",
    version=os.environ.get("PYVEC_VERSION", "1.0.0"),
    description="Python bindings of the rocmforge example stack",
    packages=["pyvec"],
    ext_modules=[
        Extension(
            "pyvec._vecmath",
            ["src/_vecmath.c"],
            include_dirs=[os.path.join(prefix, "include")],
            library_dirs=[os.path.join(prefix, "lib")],
            libraries=["vecmath", "hipvec"],
        )
    ],
    python_requires=">=3.8",
)
