"""The words the spec gives the platform, defined once: every status and kind
(`states`), the environment lifecycle's one transition table (`lifecycle`), and the
errors with their codes and HTTP statuses (`errors`). Every layer may import them;
they import nothing of the control plane but each other."""
