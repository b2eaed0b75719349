from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HostFacts(_message.Message):
    __slots__ = ("hostname", "cpu_cores", "ram_mb", "disk_gb", "os", "arch", "agent_version")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    RAM_MB_FIELD_NUMBER: _ClassVar[int]
    DISK_GB_FIELD_NUMBER: _ClassVar[int]
    OS_FIELD_NUMBER: _ClassVar[int]
    ARCH_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    cpu_cores: int
    ram_mb: int
    disk_gb: int
    os: str
    arch: str
    agent_version: str
    def __init__(self, hostname: _Optional[str] = ..., cpu_cores: _Optional[int] = ..., ram_mb: _Optional[int] = ..., disk_gb: _Optional[int] = ..., os: _Optional[str] = ..., arch: _Optional[str] = ..., agent_version: _Optional[str] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("token", "facts")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    token: str
    facts: HostFacts
    def __init__(self, token: _Optional[str] = ..., facts: _Optional[_Union[HostFacts, _Mapping]] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("server_id", "credential")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    server_id: str
    credential: str
    def __init__(self, server_id: _Optional[str] = ..., credential: _Optional[str] = ...) -> None: ...

class AgentMessage(_message.Message):
    __slots__ = ("hello", "heartbeat", "ack", "log", "result", "reply", "disk", "proxy", "phase", "shell")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    DISK_FIELD_NUMBER: _ClassVar[int]
    PROXY_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    SHELL_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    heartbeat: Heartbeat
    ack: CommandAck
    log: TaskLog
    result: CommandResult
    reply: LiveReply
    disk: DiskReport
    proxy: ProxyReport
    phase: TaskPhase
    shell: ShellFrame
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., ack: _Optional[_Union[CommandAck, _Mapping]] = ..., log: _Optional[_Union[TaskLog, _Mapping]] = ..., result: _Optional[_Union[CommandResult, _Mapping]] = ..., reply: _Optional[_Union[LiveReply, _Mapping]] = ..., disk: _Optional[_Union[DiskReport, _Mapping]] = ..., proxy: _Optional[_Union[ProxyReport, _Mapping]] = ..., phase: _Optional[_Union[TaskPhase, _Mapping]] = ..., shell: _Optional[_Union[ShellFrame, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("facts", "revision")
    FACTS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    facts: HostFacts
    revision: int
    def __init__(self, facts: _Optional[_Union[HostFacts, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("sent_at_unix_ms", "metrics", "crash_loops", "environments")
    SENT_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    CRASH_LOOPS_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENTS_FIELD_NUMBER: _ClassVar[int]
    sent_at_unix_ms: int
    metrics: HostMetrics
    crash_loops: _containers.RepeatedCompositeFieldContainer[CrashLoop]
    environments: _containers.RepeatedCompositeFieldContainer[EnvironmentStats]
    def __init__(self, sent_at_unix_ms: _Optional[int] = ..., metrics: _Optional[_Union[HostMetrics, _Mapping]] = ..., crash_loops: _Optional[_Iterable[_Union[CrashLoop, _Mapping]]] = ..., environments: _Optional[_Iterable[_Union[EnvironmentStats, _Mapping]]] = ...) -> None: ...

class EnvironmentStats(_message.Message):
    __slots__ = ("environment_id", "erp_cpu_percent", "erp_memory_used_bytes", "postgres_cpu_percent", "postgres_memory_used_bytes")
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    ERP_CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    ERP_MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    POSTGRES_CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    POSTGRES_MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    erp_cpu_percent: float
    erp_memory_used_bytes: int
    postgres_cpu_percent: float
    postgres_memory_used_bytes: int
    def __init__(self, environment_id: _Optional[str] = ..., erp_cpu_percent: _Optional[float] = ..., erp_memory_used_bytes: _Optional[int] = ..., postgres_cpu_percent: _Optional[float] = ..., postgres_memory_used_bytes: _Optional[int] = ...) -> None: ...

class CrashLoop(_message.Message):
    __slots__ = ("environment_id", "role", "restart_count", "state")
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    RESTART_COUNT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    role: str
    restart_count: int
    state: str
    def __init__(self, environment_id: _Optional[str] = ..., role: _Optional[str] = ..., restart_count: _Optional[int] = ..., state: _Optional[str] = ...) -> None: ...

class DiskReport(_message.Message):
    __slots__ = ("environments",)
    ENVIRONMENTS_FIELD_NUMBER: _ClassVar[int]
    environments: _containers.RepeatedCompositeFieldContainer[EnvironmentDisk]
    def __init__(self, environments: _Optional[_Iterable[_Union[EnvironmentDisk, _Mapping]]] = ...) -> None: ...

class ProxyReport(_message.Message):
    __slots__ = ("state_json", "state")
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    state_json: str
    state: ProxyState
    def __init__(self, state_json: _Optional[str] = ..., state: _Optional[_Union[ProxyState, _Mapping]] = ...) -> None: ...

class ProxyState(_message.Message):
    __slots__ = ("running", "reason", "certificates")
    class CertificatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Certificate
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Certificate, _Mapping]] = ...) -> None: ...
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    running: bool
    reason: str
    certificates: _containers.MessageMap[str, Certificate]
    def __init__(self, running: _Optional[bool] = ..., reason: _Optional[str] = ..., certificates: _Optional[_Mapping[str, Certificate]] = ...) -> None: ...

class Certificate(_message.Message):
    __slots__ = ("state", "valid_until", "reason")
    STATE_FIELD_NUMBER: _ClassVar[int]
    VALID_UNTIL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    state: str
    valid_until: str
    reason: str
    def __init__(self, state: _Optional[str] = ..., valid_until: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class EnvironmentDisk(_message.Message):
    __slots__ = ("environment_id", "database_bytes", "filestore_bytes", "addons_bytes", "measured_at_unix_ms", "filestore_files", "largest_tables", "attachments_missing", "files_orphaned", "missing_sample")
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    DATABASE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILESTORE_BYTES_FIELD_NUMBER: _ClassVar[int]
    ADDONS_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEASURED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    FILESTORE_FILES_FIELD_NUMBER: _ClassVar[int]
    LARGEST_TABLES_FIELD_NUMBER: _ClassVar[int]
    ATTACHMENTS_MISSING_FIELD_NUMBER: _ClassVar[int]
    FILES_ORPHANED_FIELD_NUMBER: _ClassVar[int]
    MISSING_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    database_bytes: int
    filestore_bytes: int
    addons_bytes: int
    measured_at_unix_ms: int
    filestore_files: int
    largest_tables: _containers.RepeatedCompositeFieldContainer[TableSize]
    attachments_missing: int
    files_orphaned: int
    missing_sample: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, environment_id: _Optional[str] = ..., database_bytes: _Optional[int] = ..., filestore_bytes: _Optional[int] = ..., addons_bytes: _Optional[int] = ..., measured_at_unix_ms: _Optional[int] = ..., filestore_files: _Optional[int] = ..., largest_tables: _Optional[_Iterable[_Union[TableSize, _Mapping]]] = ..., attachments_missing: _Optional[int] = ..., files_orphaned: _Optional[int] = ..., missing_sample: _Optional[_Iterable[str]] = ...) -> None: ...

class TableSize(_message.Message):
    __slots__ = ("name", "bytes", "rows")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    name: str
    bytes: int
    rows: int
    def __init__(self, name: _Optional[str] = ..., bytes: _Optional[int] = ..., rows: _Optional[int] = ...) -> None: ...

class CommandAck(_message.Message):
    __slots__ = ("command_id", "duplicate")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    duplicate: bool
    def __init__(self, command_id: _Optional[str] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class TaskLog(_message.Message):
    __slots__ = ("command_id", "seq", "level", "message")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    seq: int
    level: str
    message: str
    def __init__(self, command_id: _Optional[str] = ..., seq: _Optional[int] = ..., level: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class TaskPhase(_message.Message):
    __slots__ = ("command_id", "phase")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    phase: str
    def __init__(self, command_id: _Optional[str] = ..., phase: _Optional[str] = ...) -> None: ...

class CommandResult(_message.Message):
    __slots__ = ("command_id", "ok", "error", "result_json")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    ok: bool
    error: str
    result_json: str
    def __init__(self, command_id: _Optional[str] = ..., ok: _Optional[bool] = ..., error: _Optional[str] = ..., result_json: _Optional[str] = ...) -> None: ...

class LiveReply(_message.Message):
    __slots__ = ("correlation_id", "error_code", "error_message", "host_metrics", "container_metrics", "runtime_logs", "mails")
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HOST_METRICS_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_METRICS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_LOGS_FIELD_NUMBER: _ClassVar[int]
    MAILS_FIELD_NUMBER: _ClassVar[int]
    correlation_id: str
    error_code: str
    error_message: str
    host_metrics: HostMetrics
    container_metrics: ContainerMetrics
    runtime_logs: RuntimeLogs
    mails: Mails
    def __init__(self, correlation_id: _Optional[str] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., host_metrics: _Optional[_Union[HostMetrics, _Mapping]] = ..., container_metrics: _Optional[_Union[ContainerMetrics, _Mapping]] = ..., runtime_logs: _Optional[_Union[RuntimeLogs, _Mapping]] = ..., mails: _Optional[_Union[Mails, _Mapping]] = ...) -> None: ...

class ControlMessage(_message.Message):
    __slots__ = ("welcome", "command", "request", "shell_open", "shell")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    SHELL_OPEN_FIELD_NUMBER: _ClassVar[int]
    SHELL_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    command: Command
    request: LiveRequest
    shell_open: ShellOpen
    shell: ShellFrame
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., command: _Optional[_Union[Command, _Mapping]] = ..., request: _Optional[_Union[LiveRequest, _Mapping]] = ..., shell_open: _Optional[_Union[ShellOpen, _Mapping]] = ..., shell: _Optional[_Union[ShellFrame, _Mapping]] = ...) -> None: ...

class ShellOpen(_message.Message):
    __slots__ = ("session_id", "environment_id", "odoo", "command", "tty", "rows", "cols", "stream_url", "stream_ticket")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    ODOO_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    STREAM_URL_FIELD_NUMBER: _ClassVar[int]
    STREAM_TICKET_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    environment_id: str
    odoo: bool
    command: _containers.RepeatedScalarFieldContainer[str]
    tty: bool
    rows: int
    cols: int
    stream_url: str
    stream_ticket: str
    def __init__(self, session_id: _Optional[str] = ..., environment_id: _Optional[str] = ..., odoo: _Optional[bool] = ..., command: _Optional[_Iterable[str]] = ..., tty: _Optional[bool] = ..., rows: _Optional[int] = ..., cols: _Optional[int] = ..., stream_url: _Optional[str] = ..., stream_ticket: _Optional[str] = ...) -> None: ...

class ShellFrame(_message.Message):
    __slots__ = ("session_id", "data", "rows", "cols", "eof", "close", "opened", "exited", "exit_code", "error_code", "error_message", "stderr")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    EOF_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    OPENED_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    data: bytes
    rows: int
    cols: int
    eof: bool
    close: bool
    opened: bool
    exited: bool
    exit_code: int
    error_code: str
    error_message: str
    stderr: bool
    def __init__(self, session_id: _Optional[str] = ..., data: _Optional[bytes] = ..., rows: _Optional[int] = ..., cols: _Optional[int] = ..., eof: _Optional[bool] = ..., close: _Optional[bool] = ..., opened: _Optional[bool] = ..., exited: _Optional[bool] = ..., exit_code: _Optional[int] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., stderr: _Optional[bool] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("server_id", "heartbeat_seconds", "revision")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    server_id: str
    heartbeat_seconds: int
    revision: int
    def __init__(self, server_id: _Optional[str] = ..., heartbeat_seconds: _Optional[int] = ..., revision: _Optional[int] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("id", "kind", "payload_json", "environment")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    payload_json: str
    environment: EnvironmentCommand
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., payload_json: _Optional[str] = ..., environment: _Optional[_Union[EnvironmentCommand, _Mapping]] = ...) -> None: ...

class EnvironmentCommand(_message.Message):
    __slots__ = ("environment_id", "proxy", "hostnames", "delete_data")
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    PROXY_FIELD_NUMBER: _ClassVar[int]
    HOSTNAMES_FIELD_NUMBER: _ClassVar[int]
    DELETE_DATA_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    proxy: ProxySettings
    hostnames: _containers.RepeatedScalarFieldContainer[str]
    delete_data: bool
    def __init__(self, environment_id: _Optional[str] = ..., proxy: _Optional[_Union[ProxySettings, _Mapping]] = ..., hostnames: _Optional[_Iterable[str]] = ..., delete_data: _Optional[bool] = ...) -> None: ...

class ProxySettings(_message.Message):
    __slots__ = ("image", "acme_directory", "acme_email", "acme_roots_pem")
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ACME_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    ACME_EMAIL_FIELD_NUMBER: _ClassVar[int]
    ACME_ROOTS_PEM_FIELD_NUMBER: _ClassVar[int]
    image: str
    acme_directory: str
    acme_email: str
    acme_roots_pem: str
    def __init__(self, image: _Optional[str] = ..., acme_directory: _Optional[str] = ..., acme_email: _Optional[str] = ..., acme_roots_pem: _Optional[str] = ...) -> None: ...

class LiveRequest(_message.Message):
    __slots__ = ("correlation_id", "host_metrics", "container_metrics", "runtime_logs", "mails")
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_METRICS_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_METRICS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_LOGS_FIELD_NUMBER: _ClassVar[int]
    MAILS_FIELD_NUMBER: _ClassVar[int]
    correlation_id: str
    host_metrics: HostMetricsRequest
    container_metrics: ContainerMetricsRequest
    runtime_logs: RuntimeLogsRequest
    mails: MailsRequest
    def __init__(self, correlation_id: _Optional[str] = ..., host_metrics: _Optional[_Union[HostMetricsRequest, _Mapping]] = ..., container_metrics: _Optional[_Union[ContainerMetricsRequest, _Mapping]] = ..., runtime_logs: _Optional[_Union[RuntimeLogsRequest, _Mapping]] = ..., mails: _Optional[_Union[MailsRequest, _Mapping]] = ...) -> None: ...

class HostMetricsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ContainerMetricsRequest(_message.Message):
    __slots__ = ("environment_id",)
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    def __init__(self, environment_id: _Optional[str] = ...) -> None: ...

class RuntimeLogsRequest(_message.Message):
    __slots__ = ("environment_id", "source", "lines")
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    source: str
    lines: int
    def __init__(self, environment_id: _Optional[str] = ..., source: _Optional[str] = ..., lines: _Optional[int] = ...) -> None: ...

class HostMetrics(_message.Message):
    __slots__ = ("cpu_percent", "memory_percent", "disk_percent", "memory_used_bytes", "memory_total_bytes", "disk_used_bytes", "disk_total_bytes", "network_rx_bytes_per_second", "network_tx_bytes_per_second", "container_count", "containers_running")
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PERCENT_FIELD_NUMBER: _ClassVar[int]
    DISK_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_RX_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    NETWORK_TX_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_COUNT_FIELD_NUMBER: _ClassVar[int]
    CONTAINERS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    cpu_percent: float
    memory_percent: float
    disk_percent: float
    memory_used_bytes: int
    memory_total_bytes: int
    disk_used_bytes: int
    disk_total_bytes: int
    network_rx_bytes_per_second: float
    network_tx_bytes_per_second: float
    container_count: int
    containers_running: int
    def __init__(self, cpu_percent: _Optional[float] = ..., memory_percent: _Optional[float] = ..., disk_percent: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., disk_used_bytes: _Optional[int] = ..., disk_total_bytes: _Optional[int] = ..., network_rx_bytes_per_second: _Optional[float] = ..., network_tx_bytes_per_second: _Optional[float] = ..., container_count: _Optional[int] = ..., containers_running: _Optional[int] = ...) -> None: ...

class ContainerStats(_message.Message):
    __slots__ = ("status", "cpu_percent", "memory_used_bytes", "memory_limit_bytes", "memory_percent")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PERCENT_FIELD_NUMBER: _ClassVar[int]
    status: str
    cpu_percent: float
    memory_used_bytes: int
    memory_limit_bytes: int
    memory_percent: float
    def __init__(self, status: _Optional[str] = ..., cpu_percent: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., memory_limit_bytes: _Optional[int] = ..., memory_percent: _Optional[float] = ...) -> None: ...

class ContainerMetrics(_message.Message):
    __slots__ = ("erp", "postgres")
    ERP_FIELD_NUMBER: _ClassVar[int]
    POSTGRES_FIELD_NUMBER: _ClassVar[int]
    erp: ContainerStats
    postgres: ContainerStats
    def __init__(self, erp: _Optional[_Union[ContainerStats, _Mapping]] = ..., postgres: _Optional[_Union[ContainerStats, _Mapping]] = ...) -> None: ...

class RuntimeLogs(_message.Message):
    __slots__ = ("log", "lines", "truncated")
    LOG_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    log: str
    lines: int
    truncated: bool
    def __init__(self, log: _Optional[str] = ..., lines: _Optional[int] = ..., truncated: _Optional[bool] = ...) -> None: ...

class MailsRequest(_message.Message):
    __slots__ = ("environment_id", "limit", "mail_id")
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    MAIL_ID_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    limit: int
    mail_id: str
    def __init__(self, environment_id: _Optional[str] = ..., limit: _Optional[int] = ..., mail_id: _Optional[str] = ...) -> None: ...

class Mails(_message.Message):
    __slots__ = ("mails_json",)
    MAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    mails_json: str
    def __init__(self, mails_json: _Optional[str] = ...) -> None: ...
