"""Package layout: the top-level folders install as one import package, `gelulab` (the repository root is the
package directory, as Keras maps `keras` onto a folder with package-dir). Metadata lives in pyproject.toml."""
from setuptools import find_packages, setup

FOLDERS = ["core", "backends", "experiments", "benchmarks", "api", "cli", "layers", "testing"]
subpackages = [p for p in find_packages(include=[f"{f}*" for f in FOLDERS] + [f for f in FOLDERS])]
setup(packages=["gelulab"] + [f"gelulab.{p}" for p in subpackages], package_dir={"gelulab": "."})
