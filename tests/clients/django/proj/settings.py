"""Settings of the test project (tests/clients/django/manage.py): the least Django needs for
its `auth`, `contenttypes` and `sessions` apps and the `notes` app, on MySQL through PyMySQL."""
import os

import pymysql

# Django's MySQL backend is written for mysqlclient; PyMySQL stands in for it (Debian and
# PyPI ship it without a C toolchain), saying it is a recent enough mysqlclient.
pymysql.install_as_MySQLdb()
pymysql.version_info = (2, 2, 7, "final", 0)

SECRET_KEY = "test-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = []
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "notes",
]
MIDDLEWARE = []
ROOT_URLCONF = "proj.urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.mysql",
        "HOST": "127.0.0.1",
        "PORT": os.environ["DB_PORT"],
        "NAME": os.environ["DB_NAME"],
        "USER": os.environ["DB_USER"],
        "PASSWORD": os.environ.get("DB_PASSWORD", ""),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
# The shim keeps longer strings than a column's length rather than truncating or refusing
# them, so it reports no strict mode, and Django warns (mysql.W002): not what is tested here.
SILENCED_SYSTEM_CHECKS = ["mysql.W002"]
