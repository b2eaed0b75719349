"""A project's builds (a `test` rule's), by branch, and one build's tests with the
failures first and its log: the page a commit status in the forge links to."""

from flask import request

from control_plane.console import actor, blp, render
from control_plane.services.automation import builds as svc
from control_plane.services.projects import projects as project_svc

PAGE = 50


@blp.get("/projects/<uuid:project_id>/builds")
def builds_page(project_id):
    project = project_svc.get_project(actor(), project_id)
    branch = request.args.get("branch") or None
    rows, meta = svc.list_builds(actor(), project_id, limit=PAGE,
                                 cursor=request.args.get("cursor"), branch=branch)
    return render("builds.html", project=project, builds=rows, meta=meta, branch=branch)


@blp.get("/builds/<uuid:build_id>")
def build_page(build_id):
    build = svc.get_build(actor(), build_id)
    project = project_svc.get_project(actor(), build["project"])
    return render("build.html", build=build, project=project)
