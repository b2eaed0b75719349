"""A stand-in for the official `odoo` image's server, for tests: the same config file,
environment, command line, volumes and port, a real PostgreSQL connection, and no ERP.

Run as /entrypoint.sh (the image's entry point) it follows the official entrypoint.sh:
HOST, PORT, USER, PASSWORD (or PASSWORD_FILE) give db_host, db_port, db_user and
db_password unless the config file sets them; a command of `odoo`, `--` or options
starts the server, any other command is run as is. Run as `odoo` it is the server:

  odoo [-c FILE] [--db_host H] [--db_port P] [-r USER] [-w PASSWORD] [-d DB]
       [--addons-path A,B] [-D DATA_DIR] [-p PORT] [--http-interface ADDR]
       [--proxy-mode] [-i MODULES] [-u MODULES] [--stop-after-init]
       [--test-enable] [--test-tags SPEC] [--max-cron-threads N]
       [--smtp HOST] [--smtp-port P] [--smtp-user U] [--smtp-password PW] [--smtp-ssl]
  odoo neutralize [the same options] -d DB [--stdout]

`neutralize` is Odoo's (16+): the modules' data/neutralize.sql on the existing
database DB (outgoing mail servers off and a dummy one added, every scheduled action
off but the autovacuum, incoming mail servers off, payment providers and carriers
out of live mode, `database.is_neutralized` set); `--stdout` prints the SQL
instead. Exit 1, saying the database is not neutralized, when it cannot.

  odoo shell [the same options] [-d DB] [--shell-interface python]

`shell` is Odoo's: with standard input not a terminal, it runs that input as a Python
script (`exec(sys.stdin.read(), local_vars)`), else an interactive console
(`code.InteractiveConsole`, the one Odoo falls back to; other --shell-interface values
fall back to it too), with `env`, `self`, `odoo` and `openerp` among the variables;
it logs on stderr only, so stdout holds only what the script prints. An exception
ends it with the traceback and exit 1, `sys.exit(n)` or the console's `exit(n)` with
n, Ctrl-D with 0; the transaction is rolled back at the end unless the script called
`env.cr.commit()`. Without an ORM, `env` is a psycopg2 connection to DB in one
transaction: `env.cr` (execute(sql, params=None), fetchone, fetchall, fetchmany,
dictfetchall, rowcount, commit, rollback), `env['a.b']` for the table a_b (KeyError when
there is none) with only `search_count([])`, other domains raising
NotImplementedError; `self` and `env.user` the administrator (base.user_admin: `id`,
`login`, `name`; Odoo's are the superuser, base.user_root, login __system__, which the
stand-in lacks); `odoo` holds SUPERUSER_ID, release.version and api.Environment.
DB must exist (the shell creates nothing: exit 1 otherwise); without a database (-d or
db_name), no `env` or `self`, as in Odoo.

The config file (-c, else $ODOO_RC) must be readable and hold [options]; otherwise it
exits 1 with the reason. It waits up to 30 s for PostgreSQL, creates the database
(db_name, default "odoo") when missing with Odoo's tables in the shape the
platform touches (ir_config_parameter holding database.uuid, ir_module_module,
ir_model_data, ir_attachment, ir_cron holding the autovacuum and the mail queue,
ir_mail_server, fetchmail_server, payment_provider, delivery_carrier, res_partner
and res_users holding the administrator, res_users_apikeys, mail_message),
installs (-i, with what the modules depend on) and updates (-u, `all` for every
installed module) the add-ons in dependency order: an update of a module whose version
rose runs its migration scripts (migrations/<version>/{pre,post,end}-*.py,
`migrate(cr, version)`) in one transaction with the version change, and exits 1 with
the traceback if one raises; versions are kept as Odoo keeps them ('1.2' is
'17.0.1.2'). With --test-enable or --test-tags it runs the modules' tests as Odoo does
(testing.py; with --stop-after-init, exit 1 when one failed). Then (the filestore under
data_dir made first) it starts the cron runner (cron.py) unless max_cron_threads is 0,
and serves on 8069:
  GET /web/health    200 {"status": "pass"} when the database answers, else 503
  GET /              a small page
  GET /berth/addons  the add-ons in addons_path: directories with a __manifest__.py
  GET /berth/info    settings in effect, database uuid, installed modules
  GET /websocket     a websocket upgrade: one text frame naming the port that
                     answered, then a close. Like Odoo, with `workers` above 0 it is
                     served on gevent_port (8072), else on the HTTP port.
  POST /berth/send-mail  {"to": [..], "subject", "body", "html"?, "attachments"?:
                     [{"name", "content_base64"}]}: a MIME message sent as Odoo sends
                     mail: through the first active ir_mail_server by sequence, else
                     the options' smtp_server/smtp_port/smtp_user/smtp_password/smtp_ssl
                     (10 s timeout), a copy kept in mail_message. 200 {"sent": true,
                     "server": "host:port", "via": "ir_mail_server"|"config"}, 502
                     {"sent": false, "error"} when it could not be sent.
  POST /berth/attachments  {"name", "content_base64"}: an attachment as Odoo stores
                     one, its file at <filestore>/<sha1[:2]>/<sha1> and its ir_attachment
                     row; 200 {"id", "store_fname", "file_size"}.
"""
