"""What the tests share: fixtures (loaded as pytest plugins by tests/conftest.py:
`agents`, `backup_flow`, `docker_engine`, `proxy`), the servers they start on
loopback (`services`: PostgreSQL, Redis, moto's S3; `serve`: `berth serve`;
`scale_out`: the compose stack), and the stand-ins and receivers they talk to."""
