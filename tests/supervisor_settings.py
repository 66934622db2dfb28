"""Django settings for ``runworker --processes`` tests (``tests/django/test_runworker_processes.py``).

The bundled site's settings, with the process-test handlers (``tests.helpers.proc_tasks``, which
log to ``$QC_PROC_LOG``), ``PROCESSES`` from ``$QC_TEST_PROCESSES``, ``HEALTH_FILE`` from
``$QC_TEST_HEALTH_FILE``, ``METRICS['PORT']`` from ``$QC_TEST_METRICS_PORT``, and short leases, heartbeats
and recover rounds, so that a killed child's tasks come back within seconds.
"""

import os

from config.settings import *  # noqa: F403
from config.settings import QUEUECORE as SITE_QUEUECORE

QUEUECORE = {
    **SITE_QUEUECORE,
    "QUEUES": {"default": 1},
    "TASK_MODULES": ["tests.helpers.proc_tasks"] + (["tests.helpers.broken_in_children"]
                                                   if os.environ.get("QC_TEST_BROKEN_IN_CHILDREN") else []),
    "LEASE_DURATION": 1.5,
    "HEARTBEAT_INTERVAL": 0.3,
    "RECOVER_INTERVAL": 0.5,
    "FORWARD_INTERVAL": 0.1,
    "SHUTDOWN_TIMEOUT": 15.0,
    "PROCESSES": int(os.environ.get("QC_TEST_PROCESSES", "1")),
    "HEALTH_FILE": os.environ.get("QC_TEST_HEALTH_FILE") or None,
    **({"METRICS": {"PORT": int(os.environ["QC_TEST_METRICS_PORT"])}} if os.environ.get("QC_TEST_METRICS_PORT")
       else {}),
}
