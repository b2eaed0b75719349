"""The codes an agent's errors carry (agent/errors.py and each domain's own), named
once for both sides. A live reply puts one in its `error_code` (empty: it answered),
which the control plane turns into the API's errors
(control_plane/services/servers/monitoring.py); a refused import's code starts its
restore task's error, as the API documents."""

from enum import StrEnum


class AgentErrorCode(StrEnum):
    # The container engine, and the live replies' own.
    ENGINE_UNREACHABLE = "engine_unreachable"  # the container engine could not be reached
    ENGINE_TIMEOUT = "engine_timeout"  # it did not answer in time
    ENGINE_ERROR = "engine_error"  # it answered with an error
    CONTAINER_NOT_FOUND = "container_not_found"  # no such container on this server
    IMAGE_NOT_FOUND = "image_not_found"  # no such image on this server
    AGENT_ERROR = "agent_error"  # another of the agent's own errors
    UNAVAILABLE = "unavailable"  # anything else, or a request kind the agent does not know
    NO_MAIL_CATCHER = "no_mail_catcher"  # a server over SSH: no process to take mail

    # Why an uploaded import was refused (agent/backups/safe_zip.py, odoo_zip.py).
    IMPORT_REFUSED = "import_refused"  # refused, with no narrower reason
    IMPORT_CORRUPT = "import_corrupt"  # a damaged zip, or members not the sizes it declares
    IMPORT_UNSAFE_MEMBER = "import_unsafe_member"  # a member that may not be extracted
    IMPORT_TOO_LARGE = "import_too_large"
    IMPORT_ZIP_BOMB = "import_zip_bomb"  # a member expands far more than real data does
    IMPORT_UNRECOGNISED = "import_unrecognised"  # no Odoo zip, custom dump nor plain dump
    IMPORT_BAD_MANIFEST = "import_bad_manifest"
    IMPORT_VERSION_MISMATCH = "import_version_mismatch"  # another major ERP version
    IMPORT_MISSING_DUMP = "import_missing_dump"
    IMPORT_NOT_A_DUMP = "import_not_a_dump"

    # A command's work that failed (its task's error says how).
    DEPLOY_FAILED = "deploy_failed"
    PRE_BACKUP_FAILED = "pre_backup_failed"
    REQUIREMENTS_FAILED = "requirements_failed"
    MODULE_UPDATE_FAILED = "module_update_failed"
    BACKUP_FAILED = "backup_failed"
    RESTORE_FAILED = "restore_failed"
    EXPORT_FAILED = "export_failed"
    DRILL_FAILED = "drill_failed"  # a restore drill's copy did not restore, serve or check
    ARCHIVE_FAILED = "archive_failed"
    TRANSFER_FAILED = "transfer_failed"
    DOWNLOAD_FAILED = "download_failed"
    EXEC_FAILED = "exec_failed"
    PROXY_FAILED = "proxy_failed"
