"""The one line reader of the readers (``pipelines.ingest.input_files.iter_lines``): line numbers,
over-long lines (skipped for one-record-per-line formats, the end for bag-of-words files) and
broken compressed streams, on real text (lines of the bundled Wikipedia sample)."""
import bz2
import gzip

import pytest

from pipelines.ingest.input_files import DeadLetter, iter_lines


@pytest.fixture(scope="module")
def sample_lines(wiki_sample):
    text = bz2.decompress(open(wiki_sample, "rb").read())
    lines = [ln for ln in text.split(b"\n") if ln.strip()][:400]
    assert len(lines) == 400
    return lines


def test_lines_numbers_and_crlf(tmp_path, sample_lines):
    p = tmp_path / "s.txt.gz"
    p.write_bytes(gzip.compress(b"\r\n".join(sample_lines) + b"\r\n"))
    got = list(iter_lines(str(p), 1 << 20))
    assert got == [(i + 1, ln) for i, ln in enumerate(sample_lines)]


@pytest.mark.parametrize("skip_long", [True, False])
def test_an_over_long_line(tmp_path, sample_lines, skip_long):
    longest = max(range(len(sample_lines)), key=lambda i: len(sample_lines[i]))
    limit = len(sample_lines[longest]) - 1
    p = tmp_path / "s.txt"
    p.write_bytes(b"\n".join(sample_lines) + b"\n")
    got = list(iter_lines(str(p), limit, skip_long=skip_long))
    dead = [(n, x) for n, x in got if isinstance(x, DeadLetter)]
    long_numbers = [i + 1 for i, ln in enumerate(sample_lines) if len(ln) > limit]
    assert long_numbers[0] == dead[0][0]
    assert dead[0][1].position == "line %d" % dead[0][0]
    assert "longer than %d bytes" % limit in dead[0][1].error
    assert dead[0][1].snippet      # the start of the line, to find it
    good = [(n, x) for n, x in got if not isinstance(x, DeadLetter)]
    if skip_long:   # every other line comes out, with its own number
        assert [n for n, _ in dead] == long_numbers
        assert good == [(i + 1, ln) for i, ln in enumerate(sample_lines) if len(ln) <= limit]
    else:           # the lines before it, then the iteration ends
        assert len(dead) == 1 and got[-1] == dead[0]
        assert "lines after this point are lost" in dead[0][1].error
        assert good == [(i + 1, ln) for i, ln in enumerate(sample_lines[:long_numbers[0] - 1])]


def test_a_truncated_stream_ends_with_a_dead_letter(tmp_path, sample_lines):
    data = gzip.compress(b"\n".join(sample_lines) + b"\n")
    p = tmp_path / "cut.txt.gz"
    p.write_bytes(data[:len(data) // 2])
    got = list(iter_lines(str(p), 1 << 20))
    *good, last = got
    assert isinstance(last[1], DeadLetter) and "corrupt or truncated" in last[1].error
    assert good and good == [(i + 1, ln) for i, ln in enumerate(sample_lines[:len(good)])]
