"""CP_STORAGE_URL picks the backend; the default is a directory in the data dir."""

import pytest

from control_plane import storage
from control_plane.infra import config
from control_plane.storage.local import LocalStorage
from control_plane.storage.s3 import S3Storage


def _settings(tmp_path, **env):
    return config.load(environ={"CP_DATA_DIR": str(tmp_path / "data"), "CP_SECRET_KEY": "k",
                                **{f"CP_{k}": v for k, v in env.items()}})


def test_the_default_is_the_data_dirs_storage_folder(tmp_path):
    store = storage.from_settings(_settings(tmp_path))
    assert isinstance(store, LocalStorage)
    assert store.root == tmp_path / "data" / "storage"
    assert storage.from_settings(_settings(tmp_path)) is store  # one per configuration


def test_a_file_url(tmp_path):
    store = storage.from_settings(_settings(tmp_path, STORAGE_URL=f"file://{tmp_path}/b"))
    assert isinstance(store, LocalStorage) and store.root == tmp_path / "b"


def test_an_s3_url(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    store = storage.from_settings(_settings(tmp_path, STORAGE_URL="s3://bucket/some/prefix",
                                            S3_ENDPOINT_URL="http://127.0.0.1:9"))
    assert isinstance(store, S3Storage)
    assert (store.bucket, store.prefix) == ("bucket", "some/prefix/")
    assert store.client.meta.endpoint_url == "http://127.0.0.1:9"


@pytest.mark.parametrize("url", ["ftp://host/x", "s3://", "bucket/prefix"])
def test_an_unknown_url_is_refused(tmp_path, url):
    with pytest.raises(ValueError, match="CP_STORAGE_URL"):
        storage.from_settings(_settings(tmp_path, STORAGE_URL=url))
