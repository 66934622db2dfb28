from django.apps import AppConfig


class TestTasksConfig(AppConfig):
    """Lets the test suite's own ``tests/tasks.py`` be autodiscovered."""

    name = "tests"
    label = "queuecore_tests"
