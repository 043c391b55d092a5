"""The one error type of the what-if layer: a bad sweep specification or an impossible request."""

from __future__ import annotations


class WhatIfError(Exception):
    """A problem with what the user asked for; ``str()`` is the one line the CLI prints."""
