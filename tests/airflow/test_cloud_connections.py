"""What the provider reads from a Google Cloud or Azure connection (without the Google or Microsoft provider).

The Azure reading follows Airflow's own ``abfs://`` file system (the Microsoft Azure provider's ``fs/adls.py``), so
one connection serves an ``ObjectStoragePath`` and a commit stage alike; each convention here is one a deployment
has. A connection of another type is refused, naming the type it needs, before any request is sent.
"""

from __future__ import annotations

import json

import pytest

from airflow_commit_provider.hooks.storage import CommitStorageHook, azure_options, gcs_options
from airflow_commit_provider.protocol import InvalidOutputSpec

KEY = "a2V5LW5vdC1hLXJlYWwtb25l"


@pytest.mark.parametrize("conn_type,host,login,password,extra,expected", [
    # a connection string alone, whatever else is there
    ("wasb", "h", "acct", KEY, {"connection_string": "DefaultEndpointsProtocol=https;AccountName=a"},
     {"connection_string": "DefaultEndpointsProtocol=https;AccountName=a"}),
    # the account in the login, its key as the password (wasb's oldest form)
    ("wasb", None, "acct", KEY, {}, {"account_name": "acct", "account_key": KEY}),
    # the account URL as the host (WasbHook's form): the account is its first label
    ("wasb", "https://acct.blob.core.windows.net/", "ignored", KEY, {}, {"account_name": "acct", "account_key": KEY}),
    # a service principal: tenant in the extra, client id and secret as login and password
    ("wasb", "https://acct.blob.core.windows.net", "client-id", "secret", {"tenant_id": "t"},
     {"account_name": "acct", "client_id": "client-id", "client_secret": "secret", "tenant_id": "t"}),
    # adls: the host names the account, also without a dot
    ("adls", "acct", "client-id", "secret", {"tenant_id": "t"},
     {"account_name": "acct", "client_id": "client-id", "client_secret": "secret", "tenant_id": "t"}),
    # a SAS token and a private endpoint from the extra, the old prefixed spelling too
    ("wasb", None, "acct", None, {"extra__wasb__sas_token": "sv=1&sig=x", "account_host": "acct.privatelink.net"},
     {"account_name": "acct", "sas_token": "sv=1&sig=x", "account_host": "acct.privatelink.net"}),
    # a workload identity; an empty extra field removes what the connection's fields gave
    ("wasb", None, "acct", KEY, {"workload_identity_client_id": "w", "account_key": ""},
     {"account_name": "acct", "workload_identity_client_id": "w"}),
    # nothing but the account: adlfs takes the machine's identity (DefaultAzureCredential)
    ("wasb", None, "acct", None, {}, {"account_name": "acct"}),
])
def test_an_azure_connection_reads_as_airflows_own_file_system_reads_it(conn_type, host, login, password, extra,
                                                                        expected):
    assert azure_options(conn_type, host, login, password, extra) == expected


def test_a_google_connection_gives_its_key_project_and_endpoint():
    key = {"type": "service_account", "project_id": "p"}
    assert gcs_options({"keyfile_dict": json.dumps(key), "project": "p"}) == {"token": key, "project": "p"}
    assert gcs_options({"extra__google_cloud_platform__key_path": "/k.json"}) == {"token": "/k.json"}
    assert gcs_options({"token": "anon", "endpoint_url": "http://e"}) == {"token": "anon", "endpoint_url": "http://e"}
    assert gcs_options({}) == {}
    with pytest.raises(InvalidOutputSpec, match="keyfile_dict is not a JSON object"):
        gcs_options({"keyfile_dict": "{not json"})


@pytest.mark.parametrize("target,conn_type,needs", [
    ("gs://bucket/out", "aws", "'google_cloud_platform'"),
    ("abfs://container/out", "google_cloud_platform", "'wasb' or 'adls'"),
    ("az://container/out", "aws", "'wasb' or 'adls'"),
])
def test_a_connection_of_another_type_is_refused_naming_the_type_needed(monkeypatch, target, conn_type, needs):
    monkeypatch.setenv("AIRFLOW_CONN_COMMIT_WRONG", json.dumps({"conn_type": conn_type, "login": "x",
                                                               "password": KEY}))
    with pytest.raises(InvalidOutputSpec, match=f"is of type .{conn_type}.*{needs}") as exc:
        CommitStorageHook(conn_id="commit_wrong").get_store(target)
    assert KEY not in str(exc.value)
