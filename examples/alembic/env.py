"""An Alembic env.py whose migrations of published tables never fail the application's writes:
Alembic's own online env.py, with its migrations run inside `published_migrations` (README,
"Migrations of published tables"). Set in alembic.ini, beside `sqlalchemy.url`:

    publisher_config = publisher.toml

Offline mode (`alembic upgrade --sql`) writes SQL for another tool to run: it cannot hold the
application's writes, so it is refused here; run such SQL through `publisher migrate -f`.
"""
from alembic import context
from sqlalchemy import engine_from_config, pool

from publisher.service.alembic_migrations import published_migrations

config = context.config
target_metadata = None


def run_migrations_online() -> None:
    connectable = engine_from_config(config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.",
                                     poolclass=pool.NullPool)
    with connectable.connect() as connection:
        with published_migrations(connection, config.get_main_option("publisher_config")):
            context.configure(connection=connection, target_metadata=target_metadata)
            with context.begin_transaction():
                context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline migrations cannot hold the application's writes: run their SQL with publisher migrate -f")
run_migrations_online()
