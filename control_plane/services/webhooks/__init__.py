"""Outgoing webhooks.

- `subscriptions`: the public side (create, read, change, delete, the test ping,
  the delivery log);
- `delivery`: the scheduler job that fans the event outbox out and sends;
- `senders`: the sending threads, bounded per receiver and in total;
- `payloads`: what a request carries, per format, and its signatures;
- `urls` and `special_addresses`: where a webhook may point;
- `net`: the only code that opens connections to receivers.
"""
