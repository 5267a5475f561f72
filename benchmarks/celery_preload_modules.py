"""Imported by each Celery worker at start (see ``celery_preload.py``)."""

import pyarrow.parquet  # noqa: F401
import s3fs  # noqa: F401
from airflow.providers.amazon.aws.fs import s3 as _s3_fs  # noqa: F401
from airflow.providers.standard.operators.python import PythonOperator  # noqa: F401
from airflow.sdk.execution_time import task_runner  # noqa: F401

from airflow_commit_provider.operators import stage  # noqa: F401
