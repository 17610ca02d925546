"""`make wheel-check`: fail when a wheel ships test code or lacks the CLI's package data.

Usage: python -m tests.wheel_contents dist/dra_gpu-*.whl. The installed
package must be production code only (GUIDE: test fakes stay out of the
installed package), and must carry the files the CLI reads at run time.
"""

from __future__ import annotations

import sys
import zipfile
from collections.abc import Sequence

REQUIRED = (
    "dra_driver/data/deviceclasses.yaml",
    "dra_driver/data/compute-domain-deviceclasses.yaml",
    "dra_driver/data/computedomains-crd.yaml",
    "dra_driver/data/computedomaincliques-crd.yaml",
    "dra_driver/data/computedomainmembers-crd.yaml",
    "dra_driver/data/deviceclass-vfio.yaml",
    "dra_driver/scheduling/cel/cel.lark",
    "dra_driver/py.typed",
)
PACKAGES = ("dra_driver/", "kubelet_plugin/", "controller/")
TEST_CODE = ("tests/", "dra_driver/testing/", "fakes/", "conftest.py")


def problems(names: Sequence[str]) -> list[str]:
    """What is wrong with a wheel holding the files `names` (empty when nothing is)."""
    found = [f"test code in the wheel: {n}" for n in names if any(t in n for t in TEST_CODE)]
    found += [f"missing from the wheel: {r}" for r in REQUIRED if r not in names]
    found += [
        f"not in a package: {n}"
        for n in names
        if not n.startswith(PACKAGES) and ".dist-info/" not in n
    ]
    return found


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.wheel_contents WHEEL", file=sys.stderr)
        return 2
    with zipfile.ZipFile(argv[0]) as wheel:
        found = problems(wheel.namelist())
    for problem in found:
        print(f"{argv[0]}: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
