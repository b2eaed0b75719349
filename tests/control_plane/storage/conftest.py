"""The two storage backends, each reachable over real HTTP: the local one through
a real `berth serve` (its URLs are the control plane's own), S3 through moto's
standalone server."""

import os
import uuid

import boto3
import pytest

from control_plane import storage
from tests.support.serve import Served

SECRET = "storage-test-secret"
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def served_storage(tmp_path_factory):
    data = tmp_path_factory.mktemp("storage-served") / "data"
    s = Served(data, {"CP_SECRET_KEY": SECRET})
    s.admin("bootstrap")
    s.start()
    s.data_dir = data
    yield s
    s.stop()


@pytest.fixture(scope="session")
def s3_env():
    saved = {name: os.environ.get(name) for name in AWS}
    os.environ.update(AWS)
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def local_store(served_storage):
    return storage.from_settings({"DATA_DIR": str(served_storage.data_dir),
                                  "SECRET_KEY": SECRET, "PUBLIC_URL": served_storage.url})


@pytest.fixture
def s3_store(moto_s3, s3_env):
    bucket = f"berth-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_s3.url).create_bucket(Bucket=bucket)
    return storage.from_settings({"STORAGE_URL": f"s3://{bucket}/backups-root",
                                  "S3_ENDPOINT_URL": moto_s3.url, "DATA_DIR": "/nonexistent",
                                  "SECRET_KEY": SECRET, "PUBLIC_URL": "http://unused"})


@pytest.fixture(params=["local", "s3"])
def store(request):
    return request.getfixturevalue(f"{request.param}_store")
