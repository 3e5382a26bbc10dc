"""What the reclaim path reads of a cached network configuration and of a plugin's answer: a configuration or
capabilityArgs nested deeper than the JSON parser's recursion, a plugin's stdout nested so, and a plugin type
longer than a file name may be. Each let an exception other than the path's own out (RecursionError, or
OSError ENAMETOOLONG from the plugin lookup), which the callers, catching ValueError and CNIError, did not
turn into the one attachment's failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodegc.reclaim.cni_del import plugins_of
from nodegc.reclaim.cni_exec import CNIError, error_message, find_plugin

DEEP = "[" * 100_000 + "]" * 100_000


def test_a_configuration_nested_too_deeply_is_unusable() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        plugins_of(DEEP)


def test_a_plugin_answer_nested_too_deeply_is_shown_as_text() -> None:
    shown = error_message(DEEP.encode(), b"")
    assert shown.startswith("[[[") and len(shown) <= 500


def test_a_plugin_type_longer_than_a_file_name_is_a_cni_error(tmp_path: Path) -> None:
    with pytest.raises(CNIError, match="cannot be looked for"):
        find_plugin("a" * 300, [tmp_path])
