"""The ERP images the deploy flows break on purpose: variants of the stand-in's
image with another entrypoint, built once a module and tagged by what built them."""

import hashlib

import pytest

# A new image of the ERP that runs its update (`--stop-after-init`) but whose server
# exits at start, as one missing a library the server needs.
BROKEN_ENTRYPOINT = """#!/bin/sh
case " $* " in *" --stop-after-init "*) exec /usr/bin/odoo-stand-in "$@" ;; esac
echo "ImportError: No module named 'gevent'" >&2
exit 1
"""
# A new image whose server runs no cron thread, whatever its configuration says (as a
# server started with --max-cron-threads 0 by its image).
NO_CRON_ENTRYPOINT = """#!/bin/sh
case " $* " in *" --stop-after-init "*) exec /usr/bin/odoo-stand-in "$@" ;; esac
exec /usr/bin/odoo-stand-in "$@" --max-cron-threads 0
"""


def _variant(docker_client, erp_image, tmp_path_factory, name, entrypoint):
    digest = hashlib.sha256((entrypoint + erp_image).encode()).hexdigest()[:12]
    tag = f"berth-test-erp-{name}:{digest}"
    context = tmp_path_factory.mktemp(name)
    (context / "entrypoint.sh").write_text(entrypoint)
    (context / "Dockerfile").write_text(  # /entrypoint.sh is a link to the stand-in
        f"FROM {erp_image}\nUSER root\nRUN rm /entrypoint.sh\n"
        "COPY entrypoint.sh /entrypoint.sh\nRUN chmod 0755 /entrypoint.sh\nUSER odoo\n")
    docker_client.images.build(path=str(context), tag=tag, rm=True)
    return tag


@pytest.fixture(scope="module")
def erp_that_cannot_serve(docker_client, erp_image, tmp_path_factory):
    return _variant(docker_client, erp_image, tmp_path_factory, "broken", BROKEN_ENTRYPOINT)


@pytest.fixture(scope="module")
def erp_without_crons(docker_client, erp_image, tmp_path_factory):
    return _variant(docker_client, erp_image, tmp_path_factory, "no-cron", NO_CRON_ENTRYPOINT)
