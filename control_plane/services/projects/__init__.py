"""Projects and their add-on repositories."""
