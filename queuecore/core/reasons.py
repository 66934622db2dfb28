"""The reasons written into a task's ``error`` field by the core itself (not by a handler).

One home for each text: the script wrappers pass them to Lua in ARGV, and the worker compares
against them. Imports nothing, so any core module can use it.
"""

from __future__ import annotations

CANCELLED_BY_OPERATOR = "cancelled by operator"
WORKER_LOST = "worker lost (lease expired)"
WORKER_LOST_UNDECODABLE = f"{WORKER_LOST}; message undecodable"
REPAIR_NO_MESSAGE = "repair: task hash had no list entry and no message"
REPAIR_UNKNOWN_STATE = "repair: task hash had no list entry and an unknown state"  # + " (<state>)"

# Why a running task was asked to stop (``TaskContext.cancel_reason``): these, CANCELLED_BY_OPERATOR,
# or a timeout's own text.
SHUTDOWN = "worker shutting down"
LEASE_LOST = "lease lost"
# A timeout's text when the limit reached was the task's own deadline (+ " after <s>s"): not retried.
DEADLINE_REACHED = "the task's deadline was reached"
NOT_TIMEOUTS = (SHUTDOWN, LEASE_LOST, CANCELLED_BY_OPERATOR)  # any other cancel reason is a timeout's text
