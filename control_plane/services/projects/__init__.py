"""Projects, their add-on repositories, and deploys on a signed git push."""
