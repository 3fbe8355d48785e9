#!/usr/bin/env python3
"""A small Django project for tests/tests/shim_clients.rs: `migrate`, `createsuperuser` and
`test notes` against server-shim and against MariaDB. The database comes from the
environment: DB_PORT, DB_NAME, DB_USER, DB_PASSWORD (on 127.0.0.1)."""
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
