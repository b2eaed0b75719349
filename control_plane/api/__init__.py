"""The REST APIs: the public one (`public`, /api/public/v1) and the operations one
(`ops`, /api/v1), with what they share (authentication, idempotency, pagination, the
flask-smorest glue), and the URLs agents move backup objects through
(`agent_transfers`, `storage_urls`)."""
