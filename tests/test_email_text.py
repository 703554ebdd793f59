"""E-mail and newsgroup text on real 20 Newsgroups posts: ``--strip-quotes`` (quoted replies
and their attributions), ``--strip-signatures``, and empty posts counted as empty documents
rather than as errors."""
import collections
import io
import json
import re
import tarfile

import pytest

from pipelines.ingest import dataset
from pipelines.ingest import manifest
from lda_core.storage.vocab_file import Vocabulary
from pipelines.ingest import text_sources as ts
from pipelines.ingest import vectorize as vz

IN_PROCESS = ["--runner=FnApiRunner"]


@pytest.fixture(scope="module")
def bodies(news20_tar):
    """``{member name: post body}`` (headers stripped) of every 8th training post."""
    out = {}
    with tarfile.open(news20_tar, "r:gz") as tar:
        i = 0
        for m in tar:
            if m.isfile() and m.name.startswith("20news-bydate-train/"):
                if i % 8 == 0:
                    out[m.name] = ts.strip_email_headers(
                        tar.extractfile(m).read().decode("latin-1"))
                i += 1
    return out


def _is_subsequence(kept, lines):
    it = iter(lines)
    return all(any(k == l for l in it) for k in kept)


def test_strip_quoted_replies_on_real_posts(bodies):
    quoted = [b for b in bodies.values() if re.search(r"(?m)^In article <", b)]
    assert len(quoted) > 300
    for body in bodies.values():
        out = ts.strip_quoted_replies(body)
        lines, kept = body.split("\n"), out.split("\n")
        # only whole lines go, in order; no quoted line nor attribution is left
        assert _is_subsequence(kept, lines)
        assert not any(l.lstrip().startswith((">", "|")) for l in kept)
        assert not any(l.startswith("In article") or l.rstrip().endswith(" writes:")
                       for l in kept)
        # every line that goes is a quote or an attribution
        gone = collections.Counter(lines) - collections.Counter(kept)
        for line in gone:
            assert (line.lstrip()[:1] in (">", "|") or line.startswith(("In article", "In message"))
                    or re.search(r"(writes|wrote|says|said)(:|\.\.\.)\s*$", line)
                    or " writes in " in line or line.startswith("Quoted from")), line
    # the reply's own words stay: a post answering a quote keeps its unquoted lines
    body = quoted[0]
    own = [l for l in body.split("\n") if l.strip() and not l.lstrip().startswith((">", "|"))
           and not l.startswith("In article") and not l.rstrip().endswith(("writes:", "wrote:"))]
    assert own and all(l in ts.strip_quoted_replies(body).split("\n") for l in own)


def test_strip_signature_on_real_posts(bodies):
    signed = {k: b for k, b in bodies.items() if re.search(r"(?m)^-- *$", b)}
    assert len(signed) > 100
    for body in signed.values():
        lines = body.split("\n")
        cut = max(i for i, l in enumerate(lines) if l.rstrip(" ") == "--")
        out = ts.strip_signature(body)
        if len(lines) - cut - 1 <= ts.SIGNATURE_MAX_LINES:
            assert out.split("\n") == lines[:cut]          # the separator and what follows go
        else:
            assert out == body                              # too long for a signature
    for body in bodies.values():
        if body not in signed.values():
            assert ts.strip_signature(body) == body.replace("\r\n", "\n")


def _post_tar(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members:
            data = text.encode("latin-1")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_vectorize_strip_quotes_drops_the_attribution_words(tmp_path, news20_tar):
    members = []
    with tarfile.open(news20_tar, "r:gz") as tar:
        for m in tar:
            if m.isfile() and m.name.startswith("20news-bydate-train/"):
                members.append((m.name, tar.extractfile(m).read().decode("latin-1")))
                if len(members) >= 1500:
                    break
    src = tmp_path / "posts.tar.gz"
    _post_tar(src, members)
    df = {}
    for strip in (False, True):
        out = tmp_path / ("strip" if strip else "plain")
        m = vz.vectorize(vz.VectorizeOptions(
            inputs=[str(src)], output=str(out), encoding="latin-1", strip_headers=True,
            strip_quotes=strip, strip_signatures=strip, no_above=1.0), IN_PROCESS)
        assert m["settings"]["strip_quotes"] is strip
        assert m["settings"]["strip_signatures"] is strip
        assert manifest.tokenizer_settings(str(out))["strip_quotes"] is strip
        v = Vocabulary.read(str(out))
        df[strip] = dict(zip(v.tokens, v.df.tolist()))
    # "article" and "writes" are in the attribution lines ("In article <...> ... writes:")
    for word in ("article", "writes"):
        assert df[True].get(word, 0) < 0.25 * df[False][word], word
    # stripping only removes text: no word gains documents; the median word keeps most of
    # its documents (it is in a post's own lines, not only in a quote of it), the
    # attribution words lose most of theirs
    assert all(df[True][w] <= df[False][w] for w in df[True])
    kept = sorted(df[True].get(w, 0) / n for w, n in df[False].items())
    assert kept[len(kept) // 2] > 0.5


def test_empty_posts_are_counted_as_empty_not_as_errors(tmp_path, news20_tar):
    members = []
    with tarfile.open(news20_tar, "r:gz") as tar:
        for m in tar:
            if m.isfile() and m.name.startswith("20news-bydate-test/"):
                members.append((m.name, tar.extractfile(m).read().decode("latin-1")))
                if len(members) >= 40:
                    break
    # posts whose body is empty: the headers alone, and a whitespace-only file
    headers_only = [(n + "-headers", t.split("\n\n", 1)[0] + "\n\n") for n, t in members[:3]]
    blank = [("20news-bydate-test/misc.forsale/blank", "  \n\n")]
    folder = tmp_path / "posts"
    for name, text in members + headers_only + blank:
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text.encode("latin-1"))
    out = tmp_path / "ds"
    m = vz.vectorize(vz.VectorizeOptions(inputs=[str(folder)], output=str(out),
                                         encoding="latin-1", strip_headers=True), IN_PROCESS)
    c = m["counts"]
    assert c["dead_letters"] == 0
    assert c["empty_documents"] == len(headers_only) + len(blank)
    assert c["documents_read"] == len(members) + len(headers_only) + len(blank)
    assert c["documents_kept"] == len(members)
    assert "%d empty" % c["empty_documents"] in vz.summary(m, str(out))
    # JSON lines: an empty text field is an empty document too
    jl = tmp_path / "posts.jsonl"
    jl.write_text("".join(json.dumps({"id": n, "text": t}) + "\n"
                          for n, t in [("a", members[0][1]), ("b", ""), ("c", "   ")]))
    # (no_below 1, no_above 1: the one kept post keeps its words, so a dataset is published)
    m = vz.vectorize(vz.VectorizeOptions(inputs=[str(jl)], output=str(tmp_path / "ds2"),
                                         no_below=1, no_above=1.0), IN_PROCESS)
    assert (m["counts"]["dead_letters"], m["counts"]["empty_documents"]) == (0, 2)


def test_cli_options_reach_the_manifest(tmp_path, news20_tar, capsys):
    from pipelines.cli import main
    members = []
    with tarfile.open(news20_tar, "r:gz") as tar:
        for m in tar:
            if m.isfile():
                members.append((m.name, tar.extractfile(m).read().decode("latin-1")))
                if len(members) >= 30:
                    break
    src = tmp_path / "p.tar.gz"
    _post_tar(src, members)
    out = tmp_path / "ds"
    assert main(["vectorize", "--input", str(src), "--output", str(out), "--encoding",
                 "latin-1", "--strip-headers", "--strip-quotes", "--strip-signatures"]) == 0
    s = manifest.read_manifest(str(out))["settings"]
    assert (s["strip_headers"], s["strip_quotes"], s["strip_signatures"]) == (True, True, True)
