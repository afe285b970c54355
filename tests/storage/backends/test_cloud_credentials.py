"""Credentials for the object-store hubs (storage/backends/cloud_credentials.py), found as each cloud's own tools find
them; the AWS profile through boto3's chain is tested against a server in test_s3.py."""

from __future__ import annotations

from helpers.azurite import KEY

from jupyter_compile_cache.storage.backends.cloud_credentials import azure_credentials, google_credentials


def test_azure_credentials_are_found_as_azure_tools_find_them(tmp_path):
    string = f"DefaultEndpointsProtocol=https;AccountName=team;AccountKey={KEY};EndpointSuffix=core.windows.net"
    config, source = azure_credentials({"AZURE_STORAGE_CONNECTION_STRING": string})
    assert source == "AZURE_STORAGE_CONNECTION_STRING"
    assert config == {"account_name": "team", "account_key": KEY, "endpoint": "https://team.blob.core.windows.net"}
    sas = "BlobEndpoint=https://team.blob.core.windows.net;SharedAccessSignature=sv=1&sig=x"
    assert azure_credentials({"AZURE_STORAGE_CONNECTION_STRING": sas})[0] == {
        "sas_token": "sv=1&sig=x",
        "endpoint": "https://team.blob.core.windows.net",
        "account_name": "team",
    }
    assert azure_credentials({"AZURE_STORAGE_ACCOUNT": "team", "AZURE_STORAGE_SAS_TOKEN": "sv=1&sig=x"}) == (
        {"account_name": "team", "sas_token": "sv=1&sig=x"},
        "AZURE_STORAGE_SAS_TOKEN",
    )
    assert azure_credentials({"AZURE_STORAGE_ACCOUNT": "team", "AZURE_STORAGE_KEY": KEY})[1] == "AZURE_STORAGE_KEY"
    principal = {"AZURE_STORAGE_ACCOUNT": "team", "AZURE_CLIENT_ID": "i", "AZURE_CLIENT_SECRET": "s",
                 "AZURE_TENANT_ID": "t"}  # fmt: skip
    assert azure_credentials(principal)[1] == "AZURE_CLIENT_ID"
    assert azure_credentials({"AZURE_STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true"})[0] == {
        "use_emulator": "true"
    }
    key_file = tmp_path / "key.json"
    assert google_credentials({"GOOGLE_APPLICATION_CREDENTIALS": str(key_file)}) == (
        {"application_credentials": str(key_file)},
        "GOOGLE_APPLICATION_CREDENTIALS",
    )
    account = tmp_path / "account.json"  # obstore's variable first, as obstore takes it; an http server it names
    account.write_text('{"type": "service_account", "gcs_base_url": "http://localhost:4443"}')
    both = {"GOOGLE_SERVICE_ACCOUNT_PATH": str(account), "GOOGLE_APPLICATION_CREDENTIALS": str(key_file)}
    assert google_credentials(both) == (
        {"service_account_path": str(account), "allow_http": "true"},
        "GOOGLE_SERVICE_ACCOUNT_PATH",
    )
    adc = tmp_path / "gcloud" / "application_default_credentials.json"
    adc.parent.mkdir()
    adc.write_text("{}")
    assert google_credentials({"CLOUDSDK_CONFIG": str(adc.parent)}) == (
        {"application_credentials": str(adc)},
        "gcloud auth application-default login",
    )
