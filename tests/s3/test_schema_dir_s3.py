"""One schema per directory job on S3 (moto's server over HTTP), with the magic committer: the refusal at the job
commit leaves every upload pending and nothing visible, the refused tasks' record is read through the S3 store, and
the clear re-runs exactly them (the protocol test of :mod:`..protocol.test_schema_dir`)."""

from __future__ import annotations

from ..protocol.test_recover_valid import Calls
from ..protocol.test_schema_dir import schema_change_then_clear


def test_magic_a_clear_after_a_schema_change_reruns_the_old_schema_tasks(bucket, s3fs_fs, tmp_path):
    root = f"s3://{bucket}/out"

    def published() -> set[str]:
        return {k for k in s3fs_fs.find(root) if "/_temporary/" not in k and not k.endswith("/")}

    def local_copy() -> str:
        local = tmp_path / "copy"
        for key in published():
            if key.endswith(".parquet"):
                dest = local / key[len(root) - len("s3://"):].lstrip("/")
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(s3fs_fs.cat_file(key))
        return str(local)

    message = schema_change_then_clear(root, Calls(tmp_path / "calls"), "magic", published, local_copy)
    assert "schema digests" in message, message   # pending uploads cannot be read: the digests are named
