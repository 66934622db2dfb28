"""Django settings for the test suite."""

from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "queuecore",
    "queuecore_dashboard",
    "queuecore_adminctl",
    "tests.apps.TestTasksConfig",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]
ROOT_URLCONF = "tests.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [BASE_DIR / "templates"],  # the bundled site's login page
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "queuecore_dashboard:overview"
LOGOUT_REDIRECT_URL = "login"
# Fast password hashing: the dashboard tests log users in often.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
QUEUECORE = {"KEY_PREFIX": "qct-django"}

# Django 6.1+ sends email through MAILERS (the test runner swaps each for the locmem backend); Django 5.2
# ignores it and swaps EMAIL_BACKEND instead.
MAILERS = {"default": {"BACKEND": "django.core.mail.backends.smtp.EmailBackend"}}
