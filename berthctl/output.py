"""Printing: the API's JSON as it came (`--output json`), or plain tables and
text, where every control character from the API is shown as an escape."""

import json
import re

import click

BLOCKS = "▁▂▃▄▅▆▇█"
# C0 controls (ESC, which starts terminal sequences, among them), DEL and C1 controls
# (0x9b is a one-byte CSI): printed raw, a name or a log line could retitle the
# terminal, move the cursor or hide what follows. JSON output needs nothing:
# json.dumps escapes them all (ensure_ascii).
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
CONTROL_BUT_TAB = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text, tabs=False):
    """`text` with each control character written as an escape (`\\x1b`, `\\n`):
    the one place where text from the API is made safe for a terminal. `tabs`
    keeps tabs (log lines); in a table they would break the columns."""
    return (CONTROL_BUT_TAB if tabs else CONTROL).sub(
        lambda m: NAMED.get(m[0]) or f"\\x{ord(m[0]):02x}", str(text))


def echo(text, err=False, tabs=False):
    """click.echo of text that holds anything from the API."""
    click.echo(printable(text, tabs), err=err)


def emit(ctx_obj, data, columns=None, rows=None):
    """`--output json` prints `data` (the API's answer); a table prints `rows`
    (default: `data`) under `columns`, a list of (header, key or function)."""
    if ctx_obj.output == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=False))
        return
    rows = data if rows is None else rows
    if isinstance(rows, dict) and columns is None:
        for key, value in rows.items():
            click.echo(f"{printable(key)}: {_cell(value)}")
        return
    table(rows if isinstance(rows, list) else [rows], columns)


def table(rows, columns):
    if not rows:
        click.echo("(none)", err=True)  # stdout stays empty for scripts
        return
    header = [h for h, _ in columns]
    body = [[_cell(get(row) if callable(get) else row.get(get)) for _, get in columns]
            for row in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    for line in [header, *body]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
                   .rstrip())


def _cell(value):
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)  # escaped already
    return printable(value)


def sparkline(values):
    """One block per value, scaled between the series' minimum and maximum; a
    missing value (no sample in that minute) is a space."""
    present = [v for v in values if v is not None]
    if not present:
        return " " * len(values)
    low, high = min(present), max(present)
    span = high - low
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        elif span == 0:
            out.append(BLOCKS[0] if high == 0 else BLOCKS[len(BLOCKS) // 2])
        else:
            out.append(BLOCKS[min(len(BLOCKS) - 1, int((v - low) / span * len(BLOCKS)))])
    return "".join(out)


def human_bytes(n):
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)

