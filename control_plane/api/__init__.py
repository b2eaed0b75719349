"""The REST APIs: the public one (/api/public/v1) and the operations one (/api/v1)."""
