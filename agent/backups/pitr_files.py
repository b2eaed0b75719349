"""The filestore at a point in time (agent/backups/pitr.py): exactly the files the
recovered database names, from the base backup's map, the maps of the backups
after it and the files archived between backups. The base's files unpack while
the database recovers (`begin`); `unpack` then removes the attachment files the
recovered database does not name and adds those it names from elsewhere.

Also the archive's downloads, a WAL file's or a filestore file's: each
decompressed and checked before it takes its name."""

import hashlib
import os
import subprocess

from agent.backups import archive, objects, ondisk
from agent.backups.transfer import Checked, Transfer
from agent.errors import AgentError
from protocol import filestore_objects as fo
from protocol import wal
from protocol.errors import AgentErrorCode

READ = 1024 * 1024


class RecoveryError(AgentError):
    code = AgentErrorCode.RESTORE_FAILED


class MomentFilestore:
    def __init__(self, backups, pit, transfer, manifest, backup_id):
        self.backups, self.pit, self.transfer = backups, pit, transfer
        self.fs, self.id = manifest["filestore"], backup_id
        self._early = self._copies = None

    def begin(self, env_dir, pool):
        """The base backup's whole filestore into filestore.new, on `pool`; its future."""
        self._early = (env_dir, pool.submit(self._unpack_base, env_dir))
        return self._early[1]

    def _unpack_base(self, env_dir):
        entries = objects.read_map(self.transfer, self.fs)
        new = ondisk.new_filestore(env_dir)
        objects.unpack(self.transfer, None, new, entries=entries, local=self._local(env_dir))
        return entries

    def _local(self, env_dir):
        """The live filestore's files a restore links rather than downloads, read once."""
        if self._copies is None:
            self._copies = objects.local_copies(env_dir / "filestore", env_dir / objects.HASHES)
        return self._copies

    def unpack(self, env_dir, wanted, log):
        """filestore.new: the base backup's filestore less the attachments not in
        `wanted` (the recovered database's), plus those wanted from other backups'
        maps and the archive; returns the counts for the restore's summary."""
        if self.fs.get("layout") != fo.LAYOUT:
            raise RecoveryError(f"backup {self.id}'s filestore is not kept as objects")
        new = env_dir / "filestore.new"
        early = self._early and self._early[0] == env_dir and self._early[1]
        entries = early.result() if early else objects.read_map(self.transfer, self.fs)
        by_path = {e[fo.PATH]: e for e in fo.files(entries)}
        for other in self.pit["maps"]:
            if not wanted - by_path.keys():
                break
            transfer = self.backups._transfer(other["transfer_url"])
            for entry in fo.files(objects.read_map(transfer, other["filestore"])):
                by_path.setdefault(entry[fo.PATH], entry)
        archived = {path: name for path, name in self.pit["files"]}
        kept = [e for e in entries if e[fo.HASH] is None
                or not e[fo.PATH].startswith(wal.FILESTORE_DIR) or e[fo.PATH] in wanted]
        have = {e[fo.PATH] for e in kept}
        packed = [by_path[p] for p in sorted(wanted - have) if p in by_path]
        fetched = sorted(p for p in wanted - have - by_path.keys() if p in archived)
        missing = sorted(wanted - have - by_path.keys() - set(fetched))
        if early:  # the base's files are there: those not named go
            for entry in fo.files(entries):
                if entry[fo.PATH] not in have:
                    (new / entry[fo.PATH]).unlink(missing_ok=True)
        else:
            new = ondisk.new_filestore(env_dir)
        owner = os.stat(new)
        written = objects.unpack(self.transfer, None, new, self.backups._counter(),
                                 entries=packed if early else kept + packed,
                                 local=self._local(env_dir) if early else None)
        written += len(fo.files(kept)) if early else 0
        source = Transfer(self.pit["wal_url"], self.backups.credential)
        for path in fetched:
            target = new / path
            _makedirs(target.parent, new, owner)
            fetch(source, archived[path], target, sha256=file_name(archived[path]))
            os.chown(target, owner.st_uid, owner.st_gid)
        _own_made_dirs(new, owner)
        log("info", f"the filestore at the target: {len(wanted)} attachment files named, "
                    f"{len(wanted) - len(missing)} written ({len(packed)} from other "
                    f"backups, {len(fetched)} from the archive)")
        if missing:
            log("warning", f"{len(missing)} attachment files the recovered database names "
                           f"are in no backup or archive, e.g. {missing[0]}")
        return {"files": written + len(fetched), "files_from_archive": len(fetched),
                "missing_files": len(missing)}


def fetch(source, name, target, stored_sha256=None, sha256=None):
    """An archived object downloaded and decompressed into `target`, checked: as
    stored (`stored_sha256`, a WAL file's) or as decompressed (`sha256`, a filestore
    file's, its name)."""
    kind = "gzip" if name.endswith(".gz") else "zstd"
    chunks = Checked(source.download(name))
    part = target.with_name(f".{target.name}.part")  # a recovery reads it once whole
    with open(part, "wb") as out:
        done = subprocess.Popen(archive._compressor(kind, decompress=True),
                                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.PIPE)
        try:
            for chunk in chunks:
                done.stdin.write(chunk)
        except BrokenPipeError:
            pass  # its exit code says why
        finally:
            done.stdin.close()
            err = done.stderr.read().decode(errors="replace")[-200:]
            done.wait()
    if done.returncode != 0:
        raise RecoveryError(f"{name} from the archive does not decompress: {err}")
    if stored_sha256 and chunks.sha256 != stored_sha256 or \
            sha256 and summed(part)["sha256"] != sha256:
        raise RecoveryError(f"{name} from the archive does not match its checksum")
    part.rename(target)


def summed(path):
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(READ):
            digest.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": digest.hexdigest()}


def file_name(name):
    """An archived object's file name: its key's last part less the compression's."""
    return name.rsplit("/", 1)[-1].rsplit(".", 1)[0]


def _makedirs(path, top, owner):
    missing = []
    while not path.exists() and path != top:
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir()
        os.chown(directory, owner.st_uid, owner.st_gid)


def _own_made_dirs(top, owner):
    """Folders made for files no map listed with theirs, the ERP's like the rest (it
    writes new attachments into them)."""
    for root, dirs, _ in os.walk(top):
        for name in dirs:
            path = os.path.join(root, name)
            if os.lstat(path).st_uid == 0 and owner.st_uid != 0:
                os.chown(path, owner.st_uid, owner.st_gid)
