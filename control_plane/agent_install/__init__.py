"""What a new server downloads: the installer script (`install.sh`, served by
`installer`) and the agent's wheelhouse (`wheelhouse`), built from the installed
control plane so a server needs no access to PyPI."""
