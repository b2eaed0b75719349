"""A form the API's rules refuse comes back as its own page, with what was typed and
each refusal beside its field (`error` in templates/console/_fields.html),
instead of a page of its own that quotes API field names."""

from contextlib import contextmanager
from urllib.parse import urlsplit

from flask import current_app, g, make_response, request
from werkzeug.exceptions import HTTPException

from control_plane.vocabulary.errors import ApiError, Unprocessable

# marshmallow's words, as a person filling a form reads them.
WORDS = {"Missing data for required field.": "This is needed.",
         "Field may not be null.": "This is needed.",
         "Not a valid integer.": "Enter a whole number.",
         "Not a valid number.": "Enter a number.",
         "Not a valid boolean.": "Choose yes or no.",
         "Not a valid URL.": "Enter a whole address, such as https://example.com/hook."}


def said(messages):
    """A field's refusals as one sentence a person reads."""
    return " ".join(WORDS.get(m, m) for m in messages)


@contextmanager
def beside(field, *refusals):
    """A refusal of one of the `refusals` kinds raised within (a service's own check
    of one field: a domain's rules, a password's length) said beside `field`, as the
    schema's refusals are (its status and code kept where no page can show it again)."""
    try:
        yield
    except refusals as err:
        raise Unprocessable(err.message, code=err.code, status=err.status,
                            fields={field: err.message}) from None


def page_again(details):
    """The page the form was posted from, rendered again (422) with `details`
    ({field: words}) beside its fields and the typed values kept; or None when that
    page is not one of the console's own (no same-site Referer)."""
    source = urlsplit(request.headers.get("Referer") or "")
    if source.netloc != request.host:
        return None
    try:
        endpoint, args = current_app.url_map.bind(request.host).match(source.path, method="GET")
    except HTTPException:
        return None
    if not endpoint.startswith("console.") or endpoint == request.endpoint:
        return None
    g.form_errors, g.typed = details, request.form
    try:
        page = make_response(current_app.view_functions[endpoint](**args))
    except (ApiError, HTTPException):  # that page cannot be shown now (it was deleted...)
        return None
    page.status_code = 422
    return page
