"""Automation rules: rules.py (the rules), runs.py (their runs and actions),
triggers.py (what fires them), schedules.py (cron in a time zone), previews.py
(an environment per pushed branch). Importing the
package makes the task engine tell it of every task that ends."""

from control_plane.services.automation import runs, triggers
from control_plane.services.tasks import kinds


def _task_settled(d, outcome, org_id, now):
    triggers.after_task(d, outcome, runs.follow(d, outcome))


kinds.watch(_task_settled)
