"""airflow-commit-provider: exactly-once, crash-safe file output for Apache Airflow 3.

``airflow_commit_provider.protocol`` is the pure commit protocol (no Airflow import); the Airflow glue lives in
``operators``, ``sensors``, ``triggers``, ``hooks``, ``links`` and ``plugins``.
"""

__version__ = "0.3.0"
