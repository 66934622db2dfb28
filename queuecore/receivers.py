"""Sending a Django signal from the worker, where one receiver's exception must neither keep the
signal from the others nor change what already happened."""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal


def send_robustly(signal: Signal, logger: logging.Logger, what: str, sender: Any, **named: Any) -> None:
    """``signal.send_robust(sender, **named)``: each receiver that raises is logged at ERROR, naming it
    and ``what`` the signal was about."""
    for receiver, result in signal.send_robust(sender=sender, **named):
        if isinstance(result, Exception):
            logger.error("signal receiver %s failed for %s: %s", receiver_name(receiver), what, result,
                         exc_info=result)


def receiver_name(receiver: Any) -> str:
    """A receiver's dotted name (``module.qualname``), or its repr."""
    target = getattr(receiver, "__func__", receiver)  # a bound method: its function
    qualname = getattr(target, "__qualname__", None)
    return f"{getattr(target, '__module__', '?')}.{qualname}" if qualname else repr(receiver)
