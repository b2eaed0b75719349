"""The agent's mail catcher under a burst: ERPs of several environments sending at
once, each mail on its own connection (sign-in, one message, quit) as Odoo sends
one, an invoice-sized message (text, HTML and a 60 KB PDF).

Side by side in one run, on loopback: the catcher itself (sign-in checked, each mail
written to disk and the environment's bounds kept) and the same SMTP server that
keeps nothing (aiosmtpd alone, the same sign-in). Printed: mails per minute of
each, their ratio, and the mails lost (sent, accepted, but not listed after).
Target: at least 1,000 mails a minute, none lost.

    python benchmarks/mail_catcher.py [--mails 2000] [--environments 10] [--senders 8]
"""

import argparse
import smtplib
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from email.message import EmailMessage
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.mail.catcher import Catcher  # noqa: E402

TARGET_PER_MINUTE = 1000


def invoice(env_id, n):
    msg = EmailMessage()
    msg["From"], msg["To"] = "billing@shop.example", f"customer-{n}@example.org"
    msg["Subject"] = f"Invoice INV/2026/{n:05d} ({env_id})"
    msg.set_content("Dear customer,\n\nPlease find your invoice attached.\n" * 20)
    msg.add_alternative("<p>Dear customer,</p><p>Please find your <b>invoice</b> attached.</p>"
                        * 20, subtype="html")
    msg.add_attachment(b"%PDF-1.4\n" + bytes(60_000), maintype="application", subtype="pdf",
                       filename=f"INV_2026_{n:05d}.pdf")
    return msg


class Discarding(Catcher):
    """The same SMTP server and sign-in, keeping nothing: the baseline."""

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's name
        return "250 OK"


def burst(catcher, envs, mails, senders):
    jobs = [(envs[i % len(envs)], i) for i in range(mails)]
    messages = {job: invoice(*job) for job in jobs}  # made before the clock starts
    accepted = []
    lock = threading.Lock()

    def send(job):
        env_id, _ = job
        with smtplib.SMTP(catcher.host, catcher.port, timeout=30) as smtp:
            smtp.login(*catcher.credentials(env_id))
            smtp.send_message(messages[job])
        with lock:
            accepted.append(job)

    started = time.perf_counter()
    with ThreadPoolExecutor(senders) as pool:
        list(pool.map(send, jobs))
    return len(accepted), time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mails", type=int, default=2000)
    parser.add_argument("--environments", type=int, default=10)
    parser.add_argument("--senders", type=int, default=8)
    args = parser.parse_args()
    envs = [str(uuid.uuid4()) for _ in range(args.environments)]
    rates = {}
    for name, kind in (("nothing kept", Discarding), ("catcher", Catcher)):
        with tempfile.TemporaryDirectory() as tmp:
            catcher = kind(Path(tmp), "127.0.0.1").start()
            try:
                accepted, seconds = burst(catcher, envs, args.mails, args.senders)
                listed = sum(len(catcher.store.list(env, limit=10_000)) for env in envs)
            finally:
                catcher.stop()
        rates[name] = accepted / seconds * 60
        lost = accepted - listed if kind is Catcher else 0
        print(f"{name:>13}: {accepted} mails in {seconds:.2f} s = {rates[name]:,.0f} a minute"
              + (f", {listed} listed, {lost} lost" if kind is Catcher else ""))
    ratio = rates["catcher"] / rates["nothing kept"]
    ok = rates["catcher"] >= TARGET_PER_MINUTE and lost == 0
    print(f"catcher / nothing kept: {ratio:.2f}; target {TARGET_PER_MINUTE:,} a minute, "
          f"none lost: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
