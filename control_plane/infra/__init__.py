"""What every part of the control plane stands on: settings (`config`), the database
connection and migrations (`db`, `compiled`, `migrate`), the one clock, secrets
(`security` hashes, `secretbox` encrypts), logs and metrics (`observability`), rate
limits and the spec's pagination. No module here knows an API, a service or a model."""
