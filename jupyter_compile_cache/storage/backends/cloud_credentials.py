"""Credentials for the object-store hubs (storage/backends/object_store.py), found the way each cloud's own tools find
them: the AWS CLI's variables and files, Google's application-default credentials, Azure's connection string, keys,
SAS tokens, service principal and `az login`. Each function reads an environment mapping and returns obstore's
configuration and the name of what supplied the credential (for messages: never the credential itself)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from .base import HubError


def _connection_string(text: str) -> dict[str, str]:
    fields = dict(part.split("=", 1) for part in text.split(";") if "=" in part)
    if fields.get("UseDevelopmentStorage", "").lower() == "true":
        return {"use_emulator": "true"}
    config = {}
    for field, key in (("AccountName", "account_name"), ("AccountKey", "account_key"),
                       ("SharedAccessSignature", "sas_token"), ("BlobEndpoint", "endpoint")):  # fmt: skip
        if fields.get(field):
            config[key] = fields[field]
    if "account_name" not in config and "endpoint" in config:  # a SAS connection string names the endpoint alone
        endpoint = urlsplit(config["endpoint"])
        host_account = (endpoint.hostname or "").partition(".blob.")[0] if ".blob." in endpoint.netloc else ""
        config["account_name"] = host_account or endpoint.path.strip("/").partition("/")[0]  # an emulator's path
    if "endpoint" not in config and "account_name" in config and fields.get("EndpointSuffix"):
        protocol = fields.get("DefaultEndpointsProtocol", "https")
        config["endpoint"] = f"{protocol}://{config['account_name']}.blob.{fields['EndpointSuffix']}"
    return config


def azure_credentials(environ: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """obstore's configuration for Azure from ENVIRON, found as the `az` CLI and Azure's SDKs find it, and the name
    of what supplied the credential (None when only a machine identity could)."""
    if environ.get("AZURE_STORAGE_CONNECTION_STRING"):
        return _connection_string(environ["AZURE_STORAGE_CONNECTION_STRING"]), "AZURE_STORAGE_CONNECTION_STRING"
    config = {}
    account = environ.get("AZURE_STORAGE_ACCOUNT") or environ.get("AZURE_STORAGE_ACCOUNT_NAME")
    if account:
        config["account_name"] = account
    for variable, key in (("AZURE_STORAGE_KEY", "account_key"), ("AZURE_STORAGE_ACCOUNT_KEY", "account_key"),
                          ("AZURE_STORAGE_SAS_TOKEN", "sas_token")):  # fmt: skip
        if environ.get(variable):
            config[key] = environ[variable]
            return config, variable
    if all(environ.get(name) for name in ("AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID")):
        config.update(client_id=environ["AZURE_CLIENT_ID"], client_secret=environ["AZURE_CLIENT_SECRET"],
                      tenant_id=environ["AZURE_TENANT_ID"])  # fmt: skip
        return config, "AZURE_CLIENT_ID"
    if shutil.which("az"):
        config["use_azure_cli"] = "true"
        return config, "az login"
    return config, None  # a managed identity, where this is an Azure machine


def aws_credentials(environ: Mapping[str, str]) -> tuple[dict[str, str], str | None, Any]:
    """obstore's configuration for S3 from ENVIRON, as the AWS CLI finds it, what supplied the credential, and a
    credential provider: boto3's own chain where a profile names it (boto3 reads `~/.aws`; obstore alone does not)."""
    config = {"region": environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or ""}
    endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        config["endpoint"] = endpoint
    if environ.get("AWS_ACCESS_KEY_ID") and environ.get("AWS_SECRET_ACCESS_KEY"):
        config.update(access_key_id=environ["AWS_ACCESS_KEY_ID"], secret_access_key=environ["AWS_SECRET_ACCESS_KEY"])
        if environ.get("AWS_SESSION_TOKEN"):
            config["token"] = environ["AWS_SESSION_TOKEN"]
        return config, "AWS_ACCESS_KEY_ID", None
    home = os.path.expanduser("~")
    files = [environ.get("AWS_SHARED_CREDENTIALS_FILE", os.path.join(home, ".aws", "credentials")),
             environ.get("AWS_CONFIG_FILE", os.path.join(home, ".aws", "config"))]  # fmt: skip
    if environ.get("AWS_PROFILE") or any(os.path.isfile(path) and os.path.getsize(path) for path in files):
        try:
            import boto3.session
            from obstore.auth.boto3 import Boto3CredentialProvider
        except ImportError:
            if environ.get("AWS_PROFILE"):
                raise HubError(
                    "AWS_PROFILE names a profile of ~/.aws, which boto3 reads: pip install boto3, or set "
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
                ) from None
        else:
            session = boto3.session.Session()
            config["region"] = config["region"] or session.region_name or ""
            return config, f"AWS_PROFILE {session.profile_name!r}", Boto3CredentialProvider(session)
    if environ.get("AWS_WEB_IDENTITY_TOKEN_FILE"):
        return config, "AWS_WEB_IDENTITY_TOKEN_FILE", None
    return config, None, None  # a container's or an instance's role, where this is an AWS machine


def google_credentials(environ: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """obstore's configuration for GCS from ENVIRON, as Google's tools find it, and what supplied the credential.
    obstore's own variable for a service-account key file comes first, as obstore takes it first; that file may name
    the server (`gcs_base_url`: a private endpoint, or an emulator such as fake-gcs-server)."""
    for variable in ("GOOGLE_SERVICE_ACCOUNT_PATH", "GOOGLE_SERVICE_ACCOUNT"):
        if environ.get(variable):
            config = {"service_account_path": environ[variable]}
            try:
                with open(environ[variable]) as f:
                    endpoint = json.load(f).get("gcs_base_url") or ""
            except (OSError, ValueError, AttributeError):
                endpoint = ""  # obstore says what is wrong with the file when the client starts
            if endpoint.startswith("http://"):
                config["allow_http"] = "true"  # a server the user named, as for S3 and Azure
            return config, variable
    if environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return {"application_credentials": environ["GOOGLE_APPLICATION_CREDENTIALS"]}, "GOOGLE_APPLICATION_CREDENTIALS"
    config_dir = environ.get("CLOUDSDK_CONFIG") or os.path.join(os.path.expanduser("~"), ".config", "gcloud")
    adc = os.path.join(config_dir, "application_default_credentials.json")
    if os.path.isfile(adc):
        return {"application_credentials": adc}, "gcloud auth application-default login"
    return {}, None  # the metadata server, where this is a Google Cloud machine


MISSING_CREDENTIAL = {
    "s3": "set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
    "gs": "set GOOGLE_APPLICATION_CREDENTIALS to a key file, or run `gcloud auth application-default login`",
    "az": "set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY or "
    "AZURE_STORAGE_SAS_TOKEN, or run `az login`",
}
