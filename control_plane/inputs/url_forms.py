"""The forms of the HTTPS URLs the APIs take, as the patterns their OpenAPI
documents give. A pattern never describes less than the server takes: a client,
or a fuzzer, sending what the document forbids must see it refused, not stored."""

# A repository's URL (projects): a host name of letters, digits and hyphens
# (no credentials), a port from 1 to 65535, a path of the characters git_rules
# takes that names something (not only slashes), no query or fragment.
_LABEL = r"[A-Za-z0-9](([A-Za-z0-9]|-){0,61}[A-Za-z0-9])?"
_PORT = (r"(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}"
         r"|[1-9][0-9]{0,3}))?")
_REPO_CHAR = r"[A-Za-z0-9._~%+!$&'()*,;=@-]"
REPO_URL_PATTERN = (rf"^https://{_LABEL}(\.{_LABEL})*{_PORT}"
                    rf"/({_REPO_CHAR}|/)*{_REPO_CHAR}({_REPO_CHAR}|/)*$")

# A webhook's URL: what the server may take, no less (https in any case, then no
# space, control character or backslash). Which of those it takes is a policy
# the description states and no pattern can (IPv6 and legacy IPv4 literals,
# internationalized names, the addresses a webhook may not reach): the rest is a
# 422 `invalid_webhook_url`.
WEBHOOK_URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]://[^\x00-\x20\x7f\\]+$"
