"""The newest row of each group (each environment's last backup, each server's last
stored minute, each rule's last run): one grouped MAX joined back to its rows, so a
whole list's newest rows are read in one statement whatever the list's length."""

from peewee import fn


def newest_rows(model, group, at, *where, fields=()):
    """A query of `model`'s rows (`fields`, all by default) whose `at` is the newest of
    their `group` among the rows matching `where`. The conditions bound both the
    grouping and the rows it is joined back to; two rows of the same newest moment
    both come."""
    latest = (model.alias("latest_of_group"))
    key, moment = getattr(latest, group.name), getattr(latest, at.name)
    grouped = (latest.select(key.alias("key"), fn.MAX(moment).alias("moment"))
               .where(*_on(latest, where)).group_by(key))
    return (model.select(*fields).where(*_on(model, where))
            .join(grouped, on=((group == grouped.c.key) & (at == grouped.c.moment))))


def _on(model, where):
    """The conditions, each a function of the model (or its alias)."""
    return [condition(model) for condition in where]
