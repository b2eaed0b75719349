"""The server's HTTPS reverse proxy (one Caddy container, `berth-proxy`):

- `proxy`: `Proxy`, which keeps each environment's host names routed to its
  ERP container, renders Caddy's configuration and loads it, brings a missing
  proxy back (`watch`) and reports its health;
- `certificates`: each routed name's certificate as the proxy's state directory
  shows it, and the handshakes that make the proxy obtain missing ones.

The daemon makes one `Proxy` when first needed (`Agent.proxy()`): the
environment commands (agent.deploy.commands) route, rename and unroute through
it, and once a deploy has configured it, the daemon's watch thread calls
`watch` and `report`."""
