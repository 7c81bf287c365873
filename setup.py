"""Maps the top-level folders onto the single `det` import namespace (docs/internals.md, Packages).

Everything else about the distribution lives in pyproject.toml.
"""

from setuptools import find_packages, setup

ROOTS = {
    "det": "harness",
    "det.master": "master",
    "det.agent": "agent",
    "det.cli": "cli",
    "det.deploy": "deploy",
}


def _packages() -> list[str]:
    packages = []
    for prefix, folder in ROOTS.items():
        packages.append(prefix)
        packages += [f"{prefix}.{sub}" for sub in find_packages(folder)]
    return packages


setup(packages=_packages(), package_dir=ROOTS)
