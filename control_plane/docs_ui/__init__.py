"""The API documentation pages (Swagger UI, ReDoc), served with their scripts from
this package: no CDN, no inline script, pinned versions (static/VERSIONS).

flask-smorest renders the pages from its own templates, which load the scripts
from a URL, run an inline script and declare no charset; `BerthApi` renders them
from here instead (`render`), with a Content-Security-Policy that lets a page run
only scripts of its own origin."""

from urllib.parse import urlsplit

from flask import Blueprint, current_app, render_template, url_for

ASSETS_PATH = "/docs-assets"
blp = Blueprint("docs_ui", __name__, static_folder="static", static_url_path=ASSETS_PATH,
                template_folder="templates")


def asset_url(name):
    return f"{ASSETS_PATH}/{name}"


def _csp():
    # Swagger UI's "Try it out" calls the document's server (CP_PUBLIC_URL), which a
    # proxy may put on another origin than the page's.
    public = urlsplit(current_app.config["PUBLIC_URL"])
    connect = "'self'" + (f" {public.scheme}://{public.netloc}" if public.netloc else "")
    return ("default-src 'none'; script-src 'self'; "
            # Both UIs set style attributes and ReDoc injects <style> elements.
            "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
            f"connect-src {connect}; worker-src 'self' blob:; base-uri 'none'; "
            "form-action 'none'; frame-ancestors 'none'")


def render(template, api, **context):
    """A docs page of `api` (a flask-smorest Api) with its security headers."""
    spec_url = url_for(f"{api._make_doc_blueprint_name()}.openapi_json")
    html = render_template(f"docs_ui/{template}", title=api.spec.title, spec_url=spec_url,
                           asset_url=asset_url, **context)
    return html, 200, {
        "Content-Type": "text/html; charset=utf-8",
        "Content-Security-Policy": _csp(),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
