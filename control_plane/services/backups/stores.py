"""The one way the backup services reach storage (tests put a fake here)."""


def for_settings(settings):
    from control_plane import storage  # local directory or S3, from CP_STORAGE_URL

    return storage.from_settings(settings)
