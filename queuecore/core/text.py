"""Text from handlers (results, error messages, progress notes) made fit for Redis, and ratios as
operators read them (the dashboard and adminctl)."""

from __future__ import annotations


def storable_text(text: str) -> str:
    """``text`` as Redis can store it: a lone surrogate (``"\\ud800"``, which has no UTF-8 encoding)
    written as its escape, six characters; any other text unchanged."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


def error_message(error: BaseException) -> str:
    """``str(error)`` as it can be stored: a lone surrogate escaped, and a placeholder when the
    exception's own ``__str__`` raises (a handler's error must never stop its outcome being written)."""
    try:
        return storable_text(str(error))
    except Exception as exc:
        return f"<the error's message could not be read: {type(exc).__name__}>"


def percent_text(ratio: float) -> str:
    """``ratio`` as a percentage with one decimal, never rounded to ``0%`` or ``100%`` unless it is
    exactly that: ``<0.1%`` and ``>99.9%`` at the ends (199 failed of 200 is ``99.5%``, not ``100%``)."""
    if ratio <= 0:
        return "0%"
    if ratio >= 1:
        return "100%"
    if ratio < 0.001:
        return "<0.1%"
    if ratio > 0.999:
        return ">99.9%"
    return f"{ratio * 100:.1f}%"
