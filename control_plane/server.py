"""The WSGI server `berth serve` and `berth web` use (waitress: threaded, pure Python)."""

import sys

from waitress.server import create_server


def run_http(app, host, port):
    server = create_server(app, host=host, port=port, threads=app.config["HTTP_THREADS"],
                           ident="berth", clear_untrusted_proxy_headers=True)
    # Tests and scripts read the bound port from this line (port 0 picks one).
    print(f"berth: listening on http://{_fmt(host)}:{server.effective_port}",
          file=sys.stderr, flush=True)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


def _fmt(host):
    return f"[{host}]" if ":" in host else host
