"""The last lines an environment's container printed (stdout and stderr, as
the engine keeps them), for the runtime-log request."""

from agent.errors import ContainerNotFound, call_with_deadline

ENV_LABEL, ROLE_LABEL = "berth.environment_id", "berth.role"
SOURCES = {"erp": "erp", "container": "erp", "postgres": "postgres"}
MAX_LINES = 1000
MAX_BYTES = 1_000_000
TIMEOUT_S = 20


def runtime_logs(docker_client, environment_id, source, lines, max_bytes=MAX_BYTES,
                 timeout_s=TIMEOUT_S):
    """{"log", "lines", "truncated"}: the newest `lines` lines, oldest first.

    Raises ContainerNotFound when the environment has no container for the
    source, EngineUnreachable / EngineTimeout when the engine cannot answer
    within `timeout_s` seconds (the whole read, lookup included)."""
    role = SOURCES.get(source)
    if role is None:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
    if isinstance(lines, bool) or not isinstance(lines, int) or not 1 <= lines <= MAX_LINES:
        raise ValueError(f"lines must be an integer from 1 to {MAX_LINES}, not {lines!r}")
    raw = call_with_deadline(_read, timeout_s, docker_client, environment_id, role, lines)
    return _shape(raw, lines, max_bytes)


def _read(client, environment_id, role, lines):
    rows = client.api.containers(all=True, filters={
        "label": [f"{ENV_LABEL}={environment_id}", f"{ROLE_LABEL}={role}"]})
    if not rows:
        raise ContainerNotFound(f"environment {environment_id} has no {role} container")
    # A redeploy may briefly leave two: the running one, else the newest.
    row = min(rows, key=lambda r: (r.get("State") != "running", -(r.get("Created") or 0)))
    # One line more than asked tells whether older lines exist.
    return client.api.logs(row["Id"], stdout=True, stderr=True, timestamps=False,
                           tail=lines + 1)


def _shape(raw, lines, max_bytes):
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw or ""
    body = text[:-1] if text.endswith("\n") else text
    got = [line.removesuffix("\r") for line in body.split("\n")] if text else []
    truncated = len(got) > lines
    got = got[-lines:]
    # Keep the newest whole lines that fit: each costs its bytes plus a separator.
    size, keep = -1, 0
    for line in reversed(got):
        cost = len(line.encode("utf-8")) + 1
        if size + cost > max_bytes:
            break
        size += cost
        keep += 1
    if keep < len(got):
        truncated = True
        got = got[len(got) - keep:] if keep else []
    return {"log": "\n".join(got), "lines": len(got), "truncated": truncated}
