"""Text from handlers (results, error messages, progress notes) made fit for Redis."""

from __future__ import annotations


def storable_text(text: str) -> str:
    """``text`` as Redis can store it: a lone surrogate (``"\\ud800"``, which has no UTF-8 encoding)
    written as its escape, six characters; any other text unchanged."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text
