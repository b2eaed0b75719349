"""The pure parts of berthctl: where a re-read log resumes, and sparklines."""

from berthctl.output import BLOCKS, sparkline
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
