"""Projects and a project's environments (their status kept live by htmx)."""

import uuid

from flask import redirect, request, url_for

from control_plane.api.public.environments import EnvironmentCreateSchema, EnvironmentUpdateSchema
from control_plane.api.public.projects import ProjectCreateSchema, ProjectUpdateSchema
from control_plane.console import actor, berth, blp, confirm, form, render
from control_plane.services import overview
from control_plane.services.deploys import environments as envs
from control_plane.services.projects import projects as svc
from control_plane.services.servers import servers as server_svc
from control_plane.vocabulary import states

PAGE = 100


@blp.get("/projects")
def projects():
    rows, meta = svc.list_projects(actor(), limit=PAGE, cursor=request.args.get("cursor"))
    servers, _ = server_svc.list_servers(actor(), limit=PAGE, cursor=None)
    ids = [uuid.UUID(str(p["id"])) for p in rows]  # a page holds its ids as text
    badges = overview.badges(actor(), ids, berth().settings["APPS_DOMAIN"])
    for p, project_id in zip(rows, ids, strict=True):
        p["environments"] = badges.get(project_id, [])
    return render("projects.html", projects=rows, meta=meta, servers=servers)


@blp.post("/projects")
def create_project():
    body = form(ProjectCreateSchema())
    project = svc.create_project(actor(), **body)
    return redirect(url_for("console.project", project_id=project["id"]), 303)


def _environments(project_id):
    rows, project = envs.environments_of(actor(), project_id)
    domain = berth().settings["APPS_DOMAIN"]
    return [{"env": e, "url": envs.url_of(e, domain),
             "status": states.public_environment_status(e.status)} for e in rows], project


@blp.get("/projects/<uuid:project_id>")
def project(project_id):
    rows, project = _environments(project_id)
    return render("project.html", project=project, environments=rows)


@blp.get("/projects/<uuid:project_id>/environment-rows")
def environment_rows(project_id):
    """The environments' rows alone: the project page polls them."""
    rows, project = _environments(project_id)
    return render("_environment_rows.html", project=project, environments=rows)


@blp.post("/projects/<uuid:project_id>/environments")
def create_environment(project_id):
    body = form(EnvironmentCreateSchema())
    env = envs.create_environment(actor(), project_id, berth=berth(), **body)
    return redirect(url_for("console.environment", env_id=env.id), 303)


@blp.post("/projects/<uuid:project_id>/edit")
def edit_project(project_id):
    """Name, default branch and repository; a blank field keeps its value."""
    svc.update_project(actor(), project_id, form(ProjectUpdateSchema()))
    return redirect(url_for("console.project", project_id=project_id, done="saved"), 303)


@blp.post("/projects/<uuid:project_id>/delete")
def delete_project(project_id):
    name = svc.get_project(actor(), project_id)["name"]
    if asked := confirm("delete project", f"Delete the project {name}?", name=name):
        return asked
    svc.delete_project(actor(), project_id, "true", berth=berth())
    return redirect(url_for("console.projects", done="deleted"), 303)


@blp.post("/environments/<uuid:env_id>/edit")
def edit_environment(env_id):
    """Name and branch (the next deploy uses the branch); blank keeps the value."""
    envs.update_environment(actor(), env_id, form(EnvironmentUpdateSchema()))
    return redirect(url_for("console.environment", env_id=env_id, done="edited")
                    + "#settings-h", 303)
