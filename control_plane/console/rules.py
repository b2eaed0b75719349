"""A project's automation rules: listed in words with their next and last runs, made
and edited with a form (console/rule_form.py), their run history, a schedule's next
runs shown as the cron is typed."""

from flask import redirect, request, url_for

from control_plane.console import actor, berth, blp, confirm, render
from control_plane.console import rule_form as forms
from control_plane.services.automation import rules, runs
from control_plane.services.deploys import environments as envs
from control_plane.services.projects import projects
from control_plane.vocabulary.errors import InvalidAutomationRule

RUNS = 20


@blp.app_template_global("next_runs")
def _next_runs(cron, timezone):
    return forms.next_runs(cron, timezone)


def _choices(project_id):
    """The project's environments, for the pickers and for saying rules in words."""
    rows, _ = envs.environments_of(actor(), project_id)
    return [(str(e.id), e.name) for e in rows]


def _shown(rule, names):
    """The rule (a stored one, with its last run) said in words."""
    rule.when, rule.does = forms.said(rule, names)
    return rule


def _page(project_id, code=200, **form_state):
    project = projects.get_project(actor(), project_id)
    listed = rules.rules_of(actor(), project_id)  # all of them: at most 100 a project
    choices = _choices(project_id)
    names = dict(choices)
    return render("rules.html", code, project=project, choices=choices, rule_events=rules.EVENTS,
                  rules=[_shown(r, names) for r in listed], **form_state)


@blp.get("/projects/<uuid:project_id>/rules")
def rules_page(project_id):
    return _page(project_id)


@blp.post("/projects/<uuid:project_id>/rules")
def create_rule(project_id):
    given = forms.rule_from(request.form)
    try:
        rule = rules.create(actor(), project_id, **given)
    except InvalidAutomationRule as err:
        return _page(project_id, 422, errors=err.extra.get("details", {}), typed=request.form,
                     message=err.message)
    return redirect(url_for("console.rule_page", rule_id=rule.id, done="created"), 303)


@blp.get("/rules/<uuid:rule_id>")
def rule_page(rule_id, code=200, **form_state):
    rule = rules.get_rule(actor(), rule_id)
    choices = _choices(rule.project_id)
    history, _ = runs.list_runs(actor(), rule_id, limit=RUNS, cursor=None)
    shown = _shown(rule, dict(choices))
    return render("rule.html", code, rule=shown, project=rule.project, choices=choices,
                  rule_events=rules.EVENTS,
                  runs=history, typed=form_state.pop("typed", None) or forms.values(shown),
                  **form_state)


@blp.post("/rules/<uuid:rule_id>")
def update_rule(rule_id):
    try:
        rules.update_rule(actor(), rule_id, forms.rule_from(request.form))
    except InvalidAutomationRule as err:
        return rule_page(rule_id, 422, errors=err.extra.get("details", {}),
                         typed=request.form, message=err.message)
    return redirect(url_for("console.rule_page", rule_id=rule_id, done="saved"), 303)


@blp.post("/rules/<uuid:rule_id>/<any(enable,disable,run,delete):op>")
def change_rule(rule_id, op):
    rule = rules.get_rule(actor(), rule_id)
    if op == "delete" and (asked := confirm("delete rule", f"Delete the rule {rule.name}?")):
        return asked
    if op == "run":
        runs.run_now(actor(), rule_id, berth=berth())
    elif op == "delete":
        rules.delete_rule(actor(), rule_id)
    else:
        rules.update_rule(actor(), rule_id, {"enabled": op == "enable"})
    return redirect(url_for("console.rules_page", project_id=rule.project_id), 303)


@blp.get("/rules/next-runs")
def next_runs():
    """A schedule's next runs in its time zone, as the form is typed (htmx)."""
    times, problem = forms.next_runs(request.args.get("trigger.cron", ""),
                                     request.args.get("trigger.timezone", ""))
    return render("_next_runs.html", times=times, problem=problem)
