"""A one-off command of the ERP's image (a module update, a neutralisation) in the
network namespace of the environment's database container, which is on the
environment's network and always running while one is: a container of its own
on the network took the engine 0.35 s more to start and stop (an address, an
interface and its rules). Its container is named after the ERP's and its role,
run to its end, its output's last lines in the task log, then removed."""

import contextlib

from agent.errors import AgentError, engine_errors


def run(envs, env_id, role, image, args, *, volumes, environment, timeout, log, tail,
        network_of=None):
    """(exit code, output lines). A container of the same name left by an agent
    stopped while one ran goes first. Raises AgentError when the engine fails or
    the command outlives `timeout` seconds. `network_of`: the container whose
    network namespace it joins, if not the environment's database container."""
    n = envs._names(env_id)
    name = f"{n['erp']}-{role}"
    leftover = envs._container(name)
    if leftover is not None:
        with engine_errors():
            leftover.remove(force=True)
    with engine_errors():
        container = envs.docker.containers.run(
            image, args, name=name, detach=True, network_mode=f"container:{network_of or n['db']}",
            labels=envs._labels(env_id, role), environment=environment, volumes=volumes)
    try:
        with engine_errors(timeout):
            code = container.wait(timeout=timeout).get("StatusCode")
            output = container.logs().decode(errors="replace").splitlines()
    finally:
        with contextlib.suppress(AgentError), engine_errors():
            container.remove(force=True)
    for line in output[-tail:]:
        log("info" if code == 0 else "error", f"{role}: {line}")
    return code, output
