"""A task module that imports in the supervisor but not in its worker processes (an environment the
children differ in): ``tests/django/test_runworker_processes.py``."""

import os

# QC_TEST_BROKEN_IN_SLOT=N: in worker process N only (the others start)
if os.environ.get("QUEUECORE_SUPERVISOR_PID") and os.environ.get("QC_TEST_BROKEN_IN_SLOT", os.environ.get(
        "QUEUECORE_WORKER_SLOT")) == os.environ.get("QUEUECORE_WORKER_SLOT"):
    raise ImportError("this module cannot be imported in a worker process (a test's broken dependency)")
