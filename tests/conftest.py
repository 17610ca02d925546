"""Suite-wide setup: the tests keep out of the runner's home directory.

`dra-gpu` caches the CEL parser's tables in the user's cache directory
(`dra_driver.files.user_cache`); every test that compiles a selector, and every
plugin or CLI process the tests start, would write there. The session points
`XDG_CACHE_HOME` at a directory of its own instead (inherited by the processes
it starts), removed with pytest's other temporary directories.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _cache_home_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved
