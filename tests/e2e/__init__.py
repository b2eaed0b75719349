"""The end-to-end flows: the control plane with a real agent, containers and sshd."""
