"""The console's second factor: TOTP codes (RFC 6238, 30 s steps), each taken once.

A code is accepted for one step of clock drift either way, as authenticator apps
expect; the step of the last code accepted is kept on the user, and a code of that
step or an earlier one is refused: a code seen over a shoulder or in a log cannot
be used again."""

import datetime as dt
import hmac

import pyotp

from control_plane.infra import clock, secretbox
from control_plane.models import User
from control_plane.vocabulary.errors import InvalidTotpCode

PURPOSE = "totp"  # the secretbox purpose its secrets are sealed under
STEP_SECONDS = 30
DRIFT_STEPS = 1


def offer(user):
    """A new secret and its otpauth URI, for the user to add to an authenticator app."""
    secret = pyotp.random_base32()
    uri = pyotp.TOTP(secret).provisioning_uri(name=user.email, issuer_name="Berth")
    return secret, uri


def seal(secret):
    return secretbox.seal(secret, PURPOSE)


def _now_step():
    return int(clock.now().replace(tzinfo=dt.UTC).timestamp()) // STEP_SECONDS


def _step_of(secret, code):
    """The time step `code` belongs to, within the drift allowed; else None."""
    code = (code or "").replace(" ", "")
    if not secret or not (code.isascii() and code.isdigit()):
        return None
    otp, now = pyotp.TOTP(secret), _now_step()
    return next((step for step in range(now - DRIFT_STEPS, now + DRIFT_STEPS + 1)
                 if hmac.compare_digest(otp.generate_otp(step), code)), None)


def accept(user, code, secret=None):
    """Takes `code` from the user's secret (or `secret`, being set up) and spends its
    step, or raises InvalidTotpCode. Call it inside the transaction of what the code
    allows: spending is a conditional update, so of two requests with one code only
    one goes on."""
    secret = secret or secretbox.unseal(user.totp_secret, PURPOSE)
    step = _step_of(secret, code)
    last = User.totp_last_step
    if step is None or not (User.update(totp_last_step=step)
                            .where(User.id == user.id, last.is_null() | (last < step))
                            .execute()):
        raise InvalidTotpCode("The authentication code is not right.")
    user.totp_last_step = step
