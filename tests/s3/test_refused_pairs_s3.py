"""A Delta or Iceberg table on S3 (moto's server over HTTP), where the magic committer is otherwise allowed: a
table job with algorithm 2 or magic is refused when its committer is made, naming algorithm 1, with nothing
written to the bucket; algorithm 1 then commits. (The same pairs on a local disk, and magic off S3:
``tests/protocol/test_refused_pairs.py``.)"""

from __future__ import annotations

import pytest

from ..protocol.tables_worker import run_job
from ..protocol.test_refused_pairs import refuse_table_algorithm
from ..protocol.test_tables import expected, rows
from .test_tables_s3 import base  # noqa: F401 (the fixture)


@pytest.mark.parametrize("algorithm", [2, "magic"])
def test_a_table_on_s3_with_algorithm_2_or_magic_is_refused_with_nothing_in_the_bucket(base, bucket,  # noqa: F811
                                                                                       s3fs_fs, algorithm):
    table = refuse_table_algorithm(base, algorithm)
    assert s3fs_fs.find(bucket) == [], "the refusal wrote to the bucket"
    assert not table.exists()
    run_job(base)                                             # the advice: algorithm 1 (the default)
    assert rows(base) == expected()
