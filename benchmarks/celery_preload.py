"""Celery configuration that imports the heavy modules of a write task (the provider, pyarrow, s3fs/botocore) in
the Celery worker's main process, before it forks its pool: every task process (forked from a pool process by
Airflow's supervisor) then starts with them loaded instead of importing them on every try.

    AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS=benchmarks.celery_preload.CONFIG   (the module must be importable)

``benchmarks/distributed.py --executors CeleryExecutor:preload`` measures the difference.
"""

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

CONFIG = {**DEFAULT_CELERY_CONFIG,
          "imports": [*DEFAULT_CELERY_CONFIG.get("imports", ()), "benchmarks.celery_preload_modules"]}
