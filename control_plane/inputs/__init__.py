"""Rules for what people send, shared by the APIs, the console and `berth admin`:
text without control characters (`safe_input`), git repository URLs and refs
(`git_rules`) and the URL forms the OpenAPI documents give (`url_forms`)."""
