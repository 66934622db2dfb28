"""Settings of the ``manage.py runworker`` processes in ``tests/django/test_tasks_backend_probe.py``:
``tests/tasks_backend_settings.py``, with ``tests.helpers.dj_tasks_probe`` among the task modules."""

from tests.tasks_backend_settings import *  # noqa: F403
from tests.tasks_backend_settings import QUEUECORE

QUEUECORE["TASK_MODULES"] = [*QUEUECORE["TASK_MODULES"], "tests.helpers.dj_tasks_probe"]
