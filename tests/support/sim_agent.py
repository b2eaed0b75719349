"""A simulated agent (a stand-in: it runs no containers) that speaks the real
stream over real gRPC, in this release's protocol revision, and answers each
command as the test decides: success, a failure that changed something, one that
changed nothing, no answer at all (a hang), a dropped stream, a restart.

It acknowledges a command when it arrives, as the agent does, and holds it until
`answer`; a held command redelivered on a new stream is acknowledged again as a
duplicate. After `restart`, a command it held is answered as the real agent
answers one its restart cut short: failed, "interrupted by an agent restart"."""

import json
import queue
import threading
import time
from dataclasses import dataclass

import grpc

from protocol import wire
from protocol.kinds import CommandKind, Phase
from protocol.v1 import agent_pb2 as pb
from protocol.v1 import agent_pb2_grpc as pb_grpc

INTERRUPTED = "interrupted by an agent restart; not run again"
VERIFIED = {"verified": True, "database_size": 1000, "filestore_size": 2000,
            "total_size": 3000, "compressed_size": 1200,
            "manifest": {"format": "berth-backup/1"}, "parts": {}}


@dataclass
class Held:
    command_id: str
    kind: str
    payload: dict

    @property
    def environment_id(self):
        return self.payload["environment_id"]


def success(held):
    """What the agent reports when the command's work succeeded."""
    kind, payload = held.kind, held.payload
    if kind == CommandKind.DEPLOY:
        env = payload["environment_id"][:8]
        out = {"erp_container": f"erp-{env}", "db_container": f"db-{env}",
               "git_commit": "c" * 40}
        if payload.get("pre_backup"):
            out["pre_backup"] = VERIFIED
        return out
    if kind == CommandKind.DESTROY:
        return {"deleted_containers": 2, "deleted_database": True,
                "deleted_data": bool(payload.get("delete_data"))}
    if kind == CommandKind.BACKUP:
        return VERIFIED
    if kind == CommandKind.RESTORE:
        return {"safety": VERIFIED, "restored_from": payload.get("backup_id"),
                "neutralized": False}
    return {}


def failure(held, touched):
    """(result, error) of a failed command; `touched`: it changed something first."""
    if not touched:
        return {"untouched": True}, "simulated failure; nothing was changed"
    if held.kind == CommandKind.DEPLOY and held.payload.get("pre_backup"):
        return {"pre_backup": VERIFIED}, "simulated failure after the pre-deploy backup"
    if held.kind == CommandKind.RESTORE:
        return {"safety": VERIFIED}, "simulated failure; putting the safety backup back failed"
    return {}, "simulated failure"


class SimAgent:
    def __init__(self, address, credential, heartbeat_every=5.0):
        self.address, self.credential, self.heartbeat_every = address, credential, heartbeat_every
        self.lock = threading.Condition()
        self.held = {}  # command id -> Held: acknowledged, not answered
        self.interrupted = set()  # held when the agent restarted: answered as interrupted
        self.seen = []  # every command received, in order (redeliveries too)
        self.connected = False
        self.connect()

    # --- the stream ------------------------------------------------------------------

    def connect(self):
        self.outbox = queue.Queue()
        self.channel = grpc.insecure_channel(self.address)
        self.outbox.put(pb.AgentMessage(hello=pb.Hello(
            facts=pb.HostFacts(hostname="sim", agent_version="0.0.0-sim"),
            revision=wire.REVISION)))
        self.stream = pb_grpc.AgentGatewayStub(self.channel).Connect(
            iter(self.outbox.get, None),
            metadata=[("authorization", f"Bearer {self.credential}")])
        self.connected = True
        outbox = self.outbox
        threading.Thread(target=self._serve, args=(self.stream, outbox), daemon=True).start()
        threading.Thread(target=self._beat, args=(outbox,), daemon=True).start()

    def _beat(self, outbox):
        while self.connected and outbox is self.outbox:
            outbox.put(pb.AgentMessage(heartbeat=pb.Heartbeat(
                sent_at_unix_ms=int(time.time() * 1000))))
            time.sleep(self.heartbeat_every)

    def _serve(self, stream, outbox):
        try:
            for message in stream:
                body = message.WhichOneof("body")
                if body == "command":
                    self._command(message.command, outbox)
                elif body == "request":
                    outbox.put(pb.AgentMessage(reply=pb.LiveReply(
                        correlation_id=message.request.correlation_id,
                        container_metrics=pb.ContainerMetrics())))
        except grpc.RpcError:
            pass

    def _command(self, command, outbox):
        payload = wire.payload(command)
        with self.lock:
            self.seen.append(command.id)
            if command.id in self.interrupted:  # cut short by the restart: said so
                self.interrupted.discard(command.id)
                outbox.put(pb.AgentMessage(ack=pb.CommandAck(command_id=command.id,
                                                             duplicate=True)))
                outbox.put(_result(command.id, False, None, INTERRUPTED))
                self.lock.notify_all()
                return
            duplicate = command.id in self.held
            self.held[command.id] = Held(command.id, command.kind, payload)
            outbox.put(pb.AgentMessage(ack=pb.CommandAck(command_id=command.id,
                                                         duplicate=duplicate)))
            self.lock.notify_all()

    def disconnect(self):
        self.connected = False
        self.outbox.put(None)
        self.stream.cancel()
        self.channel.close()

    def restart(self):
        """A restart: the stream drops, the commands it held are cut short, a new
        stream begins."""
        self.disconnect()
        with self.lock:
            self.interrupted |= set(self.held)
            self.held.clear()
        self.connect()

    # --- what the test asks -------------------------------------------------------------

    def held_for(self, environment_id):
        with self.lock:
            return [h for h in self.held.values() if h.environment_id == str(environment_id)]

    def wait_command(self, environment_id, exclude=(), timeout=10):
        """The held command for the environment that is not in `exclude`, once it
        arrived."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                for h in self.held.values():
                    if h.environment_id == str(environment_id) and h.command_id not in exclude:
                        return h
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no command for environment {environment_id} arrived")
                self.lock.wait(left)

    def answer(self, held, outcome):
        """`outcome`: "success", "touched" or "untouched" (a failure)."""
        with self.lock:
            self.held.pop(held.command_id, None)
        if outcome == "success":
            if held.payload.get("pre_backup"):  # its backup done: the deploy's clock starts
                self.outbox.put(pb.AgentMessage(phase=pb.TaskPhase(
                    command_id=held.command_id, phase=Phase.DEPLOY)))
            self.outbox.put(_result(held.command_id, True, success(held), None))
        else:
            result, error = failure(held, touched=outcome == "touched")
            self.outbox.put(_result(held.command_id, False, result, error))

    def close(self):
        if self.connected:
            self.disconnect()


def _result(command_id, ok, result, error):
    return pb.AgentMessage(result=pb.CommandResult(
        command_id=command_id, ok=ok, error=error or "",
        result_json=json.dumps(result) if result is not None else ""))
