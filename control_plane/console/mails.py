"""An environment's caught mails in the console (the mail catcher: decisions.md): the
list, newest first, and one mail with its headers, text part, attachments' names and
the HTML part in a sandboxed frame. Both read live from the server's agent; a read it
cannot answer is a message on the page, as runtime logs do (console/environments.py)."""

from control_plane.console import actor, berth, blp, render
from control_plane.services.deploys import environments as envs
from control_plane.services.servers.mails import get_mail, list_mails
from control_plane.vocabulary.errors import (
    EnvironmentNotReady,
    NoMailCatcher,
    NoServer,
    RateLimited,
    ServerUnreachable,
)

# What a live read may answer that says nothing is wrong with the page itself.
LIVE_PROBLEMS = (NoMailCatcher, ServerUnreachable, EnvironmentNotReady, NoServer, RateLimited)
# Set inside the frame too: with an empty sandbox it runs no script, and under this
# policy it fetches nothing (no tracking pixel, no remote font or style sheet). A srcdoc
# frame is no fetch, so the console's `default-src 'none'` allows it; it inherits that
# policy as well, whose `style-src 'self'` still blocks the mail's inline styles.
FRAME_CSP = ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
             "img-src data:; style-src 'unsafe-inline'\">")


def _live(read, *args):
    """(the answer, None), or (None, the message) when the agent cannot give it."""
    try:
        return read(actor(), *args), None
    except LIVE_PROBLEMS as err:
        return None, err.message


@blp.get("/environments/<uuid:env_id>/mails")
def mails_page(env_id):
    env = envs.get_environment(actor(), env_id)  # another organization's: 404
    found, problem = _live(list_mails, env_id, berth(), 100)
    return render("mails.html", env=env, mails=found["mails"] if found else [],
                  problem=problem)


@blp.get("/environments/<uuid:env_id>/mails/<string:mail_id>")
def mail_page(env_id, mail_id):
    env = envs.get_environment(actor(), env_id)
    mail, problem = _live(get_mail, env_id, mail_id, berth())
    frame = FRAME_CSP + mail["html"] if mail and mail["html"] else None
    return render("mail.html", env=env, mail=mail, problem=problem, frame=frame)
