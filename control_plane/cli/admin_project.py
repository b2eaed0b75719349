"""`berth admin project webhook-secret` and `berth admin addon …`: deploy on git push."""

import click

from control_plane.cli.admin import UUID_T, admin, command


@admin.group()
def project():
    """Projects: the Git push webhook."""


@command(project, "webhook-secret")
@click.argument("project_id", type=UUID_T)
@click.option("--rotate", is_flag=True,
              help="Replace an existing secret; the old one stops working at once")
def project_webhook_secret(project_id, rotate):
    """Make the secret the Git host signs push webhooks with (shown this once), and
    print the URL to configure with it."""
    from flask import current_app

    from control_plane.services.projects import git_push

    return git_push.issue_secret(project_id, rotate=rotate,
                                 public_url=current_app.config["PUBLIC_URL"])


@admin.group()
def addon():
    """Add-on repositories, checked out next to a project's code."""


@command(addon, "add")
@click.option("--project", "project_id", type=UUID_T, required=True)
@click.option("--url", required=True, help="What the server's agent clones")
@click.option("--branch", default="main", show_default=True)
@click.option("--full-name", help="owner/name as push events name it (default: from --url)")
@click.option("--auto-deploy/--no-auto-deploy", default=True, show_default=True,
              help="Redeploy the project's auto-deploy environments on a push to the branch")
def addon_add(project_id, url, branch, full_name, auto_deploy):
    from control_plane.services.projects import addon_repositories as svc

    return svc.to_dict(svc.add(project_id, url, branch=branch, full_name=full_name,
                               auto_deploy=auto_deploy))


@command(addon, "list")
@click.option("--project", "project_id", type=UUID_T, required=True)
def addon_list(project_id):
    from control_plane.services.projects import addon_repositories as svc

    return {"addon_repositories": [svc.to_dict(a) for a in svc.list_for(project_id)]}


@command(addon, "update")
@click.argument("addon_id", type=UUID_T)
@click.option("--branch")
@click.option("--auto-deploy/--no-auto-deploy", default=None)
@click.option("--active/--inactive", "is_active", default=None)
def addon_update(addon_id, branch, auto_deploy, is_active):
    from control_plane.services.projects import addon_repositories as svc

    return svc.to_dict(svc.update(addon_id, branch=branch, auto_deploy=auto_deploy,
                                  is_active=is_active))
