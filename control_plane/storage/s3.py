"""The S3 backend (AWS or any S3-compatible store, CP_S3_ENDPOINT_URL): multipart
uploads whose parts the agent PUTs to presigned URLs, presigned GETs for
downloads. Credentials and region come from boto3's usual sources
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, profiles, roles)."""

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from control_plane.storage import check_key, check_part_number
from control_plane.vocabulary.errors import InvalidPart, StorageUnavailable, UploadNotFound


class S3Storage:
    streaming = False

    def __init__(self, bucket, prefix="", endpoint_url=None):
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        # SigV4 everywhere (presigned URLs of other stores need it too); path-style
        # addressing for endpoints that have no per-bucket host names.
        self.client = boto3.client(
            "s3", endpoint_url=endpoint_url,
            config=Config(signature_version="s3v4", retries={"max_attempts": 3},
                          s3={"addressing_style": "path" if endpoint_url else "auto"}))

    def _key(self, key):
        return self.prefix + check_key(key)

    def begin_upload(self, key):
        with _errors():
            return self.client.create_multipart_upload(Bucket=self.bucket,
                                                       Key=self._key(key))["UploadId"]

    def part_url(self, key, upload_id, part_number, expires=3600):
        return self.client.generate_presigned_url(
            "upload_part", ExpiresIn=int(expires),
            Params={"Bucket": self.bucket, "Key": self._key(key), "UploadId": upload_id,
                    "PartNumber": check_part_number(part_number)})

    def complete_upload(self, key, upload_id, parts):
        with _errors():
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=self._key(key), UploadId=upload_id,
                MultipartUpload={"Parts": [{"PartNumber": check_part_number(n),
                                            "ETag": _quoted(etag)} for n, etag in parts]})

    def abort_upload(self, key, upload_id):
        with _errors():
            self._abort(self._key(key), upload_id)

    def _abort(self, full_key, upload_id):
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=full_key,
                                               UploadId=upload_id)
        except ClientError as exc:
            if _code(exc) != "NoSuchUpload":
                raise

    def abort_uploads(self, prefix):
        full = self.prefix + check_key(prefix, prefix=True)
        aborted = 0
        with _errors():
            for page in self.client.get_paginator("list_multipart_uploads").paginate(
                    Bucket=self.bucket, Prefix=full):
                for upload in page.get("Uploads", []):
                    self._abort(upload["Key"], upload["UploadId"])
                    aborted += 1
        return aborted

    def get_url(self, key, expires=3600, filename=None):
        params = {"Bucket": self.bucket, "Key": self._key(key)}
        if filename:
            params["ResponseContentDisposition"] = f'attachment; filename="{filename}"'
        return self.client.generate_presigned_url("get_object", Params=params,
                                                  ExpiresIn=int(expires))

    def size(self, key):
        with _errors():
            try:
                return self.client.head_object(Bucket=self.bucket,
                                               Key=self._key(key))["ContentLength"]
            except ClientError as exc:
                if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise

    def open(self, key):
        """The object's streaming body (read(n), close)."""
        with _errors():
            try:
                return _Body(self.client.get_object(Bucket=self.bucket,
                                                    Key=self._key(key))["Body"])
            except ClientError as exc:
                if _code(exc) in ("404", "NoSuchKey"):
                    raise FileNotFoundError(key) from None
                raise

    def delete_prefix(self, prefix):
        full = self.prefix + check_key(prefix, prefix=True)
        removed = 0
        with _errors():
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=full):
                batch = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
                if batch:  # a page holds at most 1000 keys, delete_objects' limit too
                    self.client.delete_objects(Bucket=self.bucket,
                                               Delete={"Objects": batch, "Quiet": True})
                    removed += len(batch)
        return removed


class _errors:
    """Transport and service failures as the API's 502 storage_unavailable; what
    the caller expects (ClientError it handles) passes through untouched."""

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if isinstance(exc, BotoCoreError):
            raise StorageUnavailable(f"S3 storage: {exc}") from exc
        if isinstance(exc, ClientError) and _code(exc) in _AS_LOCAL:
            raise _AS_LOCAL[_code(exc)](f"S3 storage: {exc}") from exc
        if isinstance(exc, ClientError):
            raise StorageUnavailable(f"S3 storage: {_code(exc)}: {exc}") from exc
        return False


class _Body:
    """A streaming body whose broken read is storage_unavailable too."""

    def __init__(self, body):
        self.body = body

    def read(self, n=-1):
        with _errors():
            try:
                return self.body.read(n)
            except OSError as exc:
                raise StorageUnavailable(f"S3 storage: reading the object failed: {exc}") from exc

    def close(self):
        self.body.close()


# S3's answers to a wrong part list, as the local backend raises them.
_AS_LOCAL = {"InvalidPart": InvalidPart, "InvalidPartOrder": InvalidPart,
             "EntityTooSmall": InvalidPart, "NoSuchUpload": UploadNotFound}


def _code(exc):
    return exc.response.get("Error", {}).get("Code", "")


def _quoted(etag):
    return '"' + str(etag).strip('"') + '"'
