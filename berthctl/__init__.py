"""berthctl: the command-line client of Berth's public and operations APIs.

Standard library and click only, and nothing of the server's packages: it is
installed where no control plane runs."""

from importlib import metadata

try:
    __version__ = metadata.version("berth")
except metadata.PackageNotFoundError:  # run from a source tree
    __version__ = "0+unknown"
