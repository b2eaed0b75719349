"""What a new server installs: the installer script (`install.sh`, with this
control plane's address written in by `script`) and the agent's wheelhouse
(`wheelhouse`), built from the installed control plane so a server needs no access
to PyPI. Served by api/installer.py, sent over SSH by gateway/ssh/installer.py."""
