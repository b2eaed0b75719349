"""The pure parts of berthctl: where a re-read log resumes, sparklines, and text
made safe for a terminal."""

from berthctl.output import BLOCKS, printable, sparkline
from berthctl.tasks import LogTail, overlap


def test_overlap_finds_where_the_new_window_continues():
    assert overlap(["a", "b", "c"], ["b", "c", "d"]) == 2
    assert overlap(["a", "b", "c"], ["a", "b", "c"]) == 3
    assert overlap(["a", "b"], ["x", "y"]) == 0
    assert overlap([], ["x"]) == 0


def test_log_tail_prints_each_line_once():
    tail = LogTail()
    assert tail.new_lines(["1", "2"], False) == ["1", "2"]
    assert tail.new_lines(["1", "2", "3"], False) == ["3"]
    assert tail.new_lines(["1", "2", "3"], False) == []
    # Past the endpoint's window the oldest lines drop out: resumed by overlap.
    assert tail.new_lines(["2", "3", "4", "5"], True) == ["4", "5"]


def test_sparkline_scales_between_min_and_max_and_leaves_gaps():
    line = sparkline([0, None, 50, 100])
    assert line == BLOCKS[0] + " " + BLOCKS[4] + BLOCKS[-1]
    assert sparkline([None, None]) == "  "
    assert sparkline([3, 3]) == BLOCKS[4] * 2


def test_printable_escapes_every_control_character():
    assert printable("a\x1b[31mb\x9bc\x7f\x00\r\n\td") == "a\\x1b[31mb\\x9bc\\x7f\\x00\\r\\n\\td"
    assert printable("a\tb\x07", tabs=True) == "a\tb\\x07"  # a log line keeps its tabs
    assert printable("é ✓ \xa0") == "é ✓ \xa0"  # printable text, past C1 too, is left alone
    assert printable(3) == "3"
