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
MAX_PART_BYTES = 512 * 1024  # of a text or HTML part read back: a live reply stays small
_ID = re.compile(r"[0-9]{13}-[0-9a-f]{32}")
_ENV = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_environment_id(text):
    return bool(_ENV.fullmatch(str(text)))


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
        return sorted((p for p in folder.glob("*.eml") if _ID.fullmatch(p.stem)), reverse=True)

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
        with self._lock:  # the bounds hold for a quiet environment too (its age)
            self._prune(folder)
        out = []
        for path in self._files(folder)[:limit]:
            try:
                out.append(summary(path.stem, _parse(path.read_bytes())))
            except FileNotFoundError:  # pruned meanwhile
                continue
            except Exception:  # noqa: BLE001 - a mail not even its sender could read
                out.append(unreadable(path.stem))
        return out

    def read(self, env_id, mail_id):
        """One mail whole (headers, text, HTML, attachments' names and sizes), or None."""
        if not _ID.fullmatch(mail_id or ""):
            return None
        path = self._dir(env_id) / f"{mail_id}.eml"
        try:
            message = _parse(path.read_bytes())
        except FileNotFoundError:
            return None
        try:
            shown = summary(mail_id, message)
            text, html = message.get_body(("plain",)), message.get_body(("html",))
        except Exception:  # noqa: BLE001 - its structure cannot be read
            return {**unreadable(mail_id), "headers": [], "text": "", "html": "",
                    "truncated": False}
        text, cut_text = _content(text)
        html, cut_html = _content(html)
        return {**shown, "headers": [(k, _header(message, k)) for k in message.keys()],
                "text": text, "html": html, "truncated": cut_text or cut_html}

    def forget(self, env_id):
        """The environment's mails, all of them (it is destroyed)."""
        if is_environment_id(env_id):
            shutil.rmtree(self._dir(env_id), ignore_errors=True)


def _parse(raw):
    return email.message_from_bytes(raw, policy=email.policy.default)


def _content(part):
    """A text part's text (its declared charset, else UTF-8 with replacements), at most
    MAX_PART_BYTES of it: (text, whether it was cut)."""
    if part is None:
        return "", False
    try:
        text = part.get_content()
    except (LookupError, UnicodeError, ValueError):  # an unknown or lying charset
        text = (part.get_payload(decode=True) or b"").decode("utf-8", "replace")
    raw = text.encode("utf-8")
    if len(raw) <= MAX_PART_BYTES:
        return text, False
    return raw[:MAX_PART_BYTES].decode("utf-8", "ignore"), True


def _header(message, name):
    try:
        return str(message[name])
    except Exception:  # noqa: BLE001 - a header the parser cannot decode: its raw form
        return str(message.get_all(name, [""])[0].encode("utf-8", "replace"))


def unreadable(mail_id):
    return {"id": mail_id, "received_at_unix_ms": int(mail_id[:13]), "from": "", "to": "",
            "subject": "(this mail could not be read)", "attachments": [], "has_html": False}


def summary(mail_id, message):
    attachments = [{"name": part.get_filename() or "",
                    "size": len(part.get_payload(decode=True) or b"")}
                   for part in message.iter_attachments()]
    return {"id": mail_id, "received_at_unix_ms": int(mail_id[:13]),
            "from": str(message.get("From", "")), "to": str(message.get("To", "")),
            "subject": str(message.get("Subject", "")), "attachments": attachments,
            "has_html": message.get_body(("html",)) is not None}
