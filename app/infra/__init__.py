"""Infrastructure: configuration, the database and its embedded server, migrations, backups, secrets."""
