"""Settings of the ``manage.py runworker`` processes in ``tests/django/test_tasks_backend.py``: the
test settings, with Django's Tasks API on queuecore, and the connection (``QUEUECORE_REDIS_URL``,
``QUEUECORE_KEY_PREFIX``) and quick intervals of a test."""

import os

from tests.settings import *  # noqa: F403

TASKS = {"default": {"BACKEND": "queuecore.tasks_backend.QueuecoreBackend", "QUEUES": ["default", "low"]}}
QUEUECORE = {
    "REDIS_URL": os.environ["QUEUECORE_REDIS_URL"],
    "KEY_PREFIX": os.environ["QUEUECORE_KEY_PREFIX"],
    "QUEUES": {"default": 1, "low": 1},
    "TASK_MODULES": ["tests.helpers.dj_tasks"],
    "RETRY_DELAY": "tests.helpers.dj_tasks.quick_retry",
    "LEASE_DURATION": 2.0,
    "HEARTBEAT_INTERVAL": 0.2,
    "RECOVER_INTERVAL": 0.3,
    "FORWARD_INTERVAL": 0.05,
    "JANITOR_INTERVAL": 0.5,
    "SHUTDOWN_TIMEOUT": 5.0,
}
