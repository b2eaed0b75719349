#!/bin/sh
# Removes what an interrupted test run left in the Docker engine: containers made
# from the test images (label berth.test-image; the agent's restart policy brings
# them back with the engine) and the environment networks nothing uses any more.
# A leftover `berth-proxy` would otherwise hold the name the proxy tests need.
set -eu

ids=$(docker ps -aq --filter label=berth.test-image)
[ -z "$ids" ] || docker rm -f $ids >/dev/null
docker network prune -f --filter label=berth.environment_id >/dev/null
