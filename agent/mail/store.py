"""Caught mails on disk: one file per mail, `<data>/mails/<environment id>/
<unix ms>-<id>.eml`, bounded per environment (the newest MAX_MAILS, none older
than MAX_AGE_DAYS, MAX_BYTES in all) and removed with the environment."""

import email
import email.policy
import os
import re
import shutil
import threading
import time
import uuid
from pathlib import Path

MAX_MAILS = 500
MAX_AGE_DAYS = 7
MAX_BYTES = 100 * 1024 * 1024
MAX_MAIL_BYTES = 10 * 1024 * 1024  # one message; the SMTP server refuses larger ones
_ID = re.compile(r"^[0-9]{13}-[0-9a-f]{32}$")
_ENV = re.compile(r"^[0-9a-f-]{36}$")


def is_environment_id(text):
    return bool(_ENV.match(str(text)))


class MailStore:
    def __init__(self, root):
        self.root = Path(root)
        self._lock = threading.Lock()  # one writer prunes at a time

    def _dir(self, env_id):
        if not is_environment_id(env_id):
            raise ValueError("not an environment id")
        return self.root / str(env_id)

    def save(self, env_id, content: bytes):
        """Keep one mail; returns its id. The oldest go past the bounds."""
        folder = self._dir(env_id)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        mail_id = f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex}"
        tmp = folder / f".{mail_id}.tmp"
        tmp.write_bytes(content)
        os.replace(tmp, folder / f"{mail_id}.eml")  # whole or absent
        with self._lock:
            self._prune(folder)
        return mail_id

    def _files(self, folder):
        return sorted((p for p in folder.glob("*.eml") if _ID.match(p.stem)), reverse=True)

    def _prune(self, folder):
        oldest = (time.time() - MAX_AGE_DAYS * 86400) * 1000
        total = 0
        for i, path in enumerate(self._files(folder)):  # newest first
            try:
                total += path.stat().st_size
            except FileNotFoundError:
                continue
            if i >= MAX_MAILS or total > MAX_BYTES or int(path.stem[:13]) < oldest:
                path.unlink(missing_ok=True)

    def list(self, env_id, limit=50):
        """The newest `limit` mails, newest first: their summaries."""
        folder = self._dir(env_id)
        if not folder.is_dir():
            return []
        out = []
        for path in self._files(folder)[:limit]:
            try:
                out.append(summary(path.stem, _parse(path.read_bytes())))
            except FileNotFoundError:  # pruned meanwhile
                continue
        return out

    def read(self, env_id, mail_id):
        """One mail whole (headers, text, HTML, attachments' names and sizes), or None."""
        if not _ID.match(mail_id or ""):
            return None
        path = self._dir(env_id) / f"{mail_id}.eml"
        try:
            message = _parse(path.read_bytes())
        except FileNotFoundError:
            return None
        text, html = message.get_body(("plain",)), message.get_body(("html",))
        return {**summary(mail_id, message),
                "headers": [(k, str(v)) for k, v in message.items()],
                "text": text.get_content() if text else "",
                "html": html.get_content() if html else ""}

    def forget(self, env_id):
        """The environment's mails, all of them (it is destroyed)."""
        if is_environment_id(env_id):
            shutil.rmtree(self._dir(env_id), ignore_errors=True)


def _parse(raw):
    return email.message_from_bytes(raw, policy=email.policy.default)


def summary(mail_id, message):
    attachments = [{"name": part.get_filename() or "",
                    "size": len(part.get_payload(decode=True) or b"")}
                   for part in message.iter_attachments()]
    return {"id": mail_id, "received_at_unix_ms": int(mail_id[:13]),
            "from": str(message.get("From", "")), "to": str(message.get("To", "")),
            "subject": str(message.get("Subject", "")), "attachments": attachments,
            "has_html": message.get_body(("html",)) is not None}
