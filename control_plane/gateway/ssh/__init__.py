"""Servers reached over SSH: an `AgentLink` that runs `berth-agent` there, one
invocation per call, with the message on standard input (agent/over_ssh.py). One
class per concern, composed by `SshLink` (link.py):

- `Sessions` (sessions.py): the connections, their bounds and host keys, and
  `invoke` of one `berth-agent` command; live reads go through it (`live`).
- `Commands` (commands.py): the durable commands, one `berth-agent exec` each.
- `Installer` (installer.py): the agent installed or brought up to date there, or
  turned into a resident one.
- `Checks` (checks.py, the scheduler's job): reachable or not, the facts, the
  commands due, the reports.

What an agent reports is read by gateway/reports.py, as a stream's is."""

from control_plane.gateway.ssh.link import Reach, SshLink

__all__ = ["Reach", "SshLink"]
