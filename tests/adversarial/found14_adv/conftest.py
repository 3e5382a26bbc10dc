"""found9's answer rewriter (on the wire, never the client), for the tests of this round."""

from __future__ import annotations

from tests.adversarial.found9.conftest import tamper

__all__ = ["tamper"]
