"""Make ``enwiki-sample-sections.jsonl.bz2`` (the demo's input) from the bundled dump sample.

One JSON line per section of each article of ``enwiki-sample-206pages.xml.bz2``: ``id``
(``PAGEID-N``, N the section's position in its article), ``title`` (``Article — Section``;
the lead section has the article's title alone) and ``text`` (the section's plain text). The
markup is removed by gensim's ``filter_wiki`` (as ``ldabeam vectorize --format wiki`` does);
the leftover gallery lines ``File:NAME.jpg|caption`` keep their caption only. Redirects,
sections of fewer than 60 words and the list-like sections at the end of an article (a
heading naming references, external links, see also, notes, further reading, a
bibliography, sources, works cited or citations) are left out.

Why sections: the 106 articles of the sample are about 106 unrelated subjects, too few
documents for LDA to find shared themes; their 1,488 sections give the topics of the demo.

    python data/wiki_sections.py            # rewrites data/enwiki-sample-sections.jsonl.bz2
"""
import bz2
import json
import os
import re

from gensim.corpora.wikicorpus import extract_pages, filter_wiki

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "enwiki-sample-206pages.xml.bz2")
TARGET = os.path.join(HERE, "enwiki-sample-sections.jsonl.bz2")
MIN_WORDS = 60
# a section whose heading holds one of these is end matter (lists of works and links)
END_MATTER = ("reference", "external link", "see also", "further reading", "notes",
              "bibliography", "sources", "footnotes", "works cited", "citations")


def sections(source=SOURCE):
    """(id, title, text) of every kept section, in dump order."""
    with bz2.open(source) as f:
        for title, text, pageid in extract_pages(f, filter_namespaces=("0",)):
            if text.lstrip().lower().startswith("#redirect"):
                continue
            body = filter_wiki(text)
            body = re.sub(r"(?i)\b(?:file|image):[^|\n]*\|", " ", body)
            parts = re.split(r"\n=+\s*([^=\n]+?)\s*=+\s*\n", "\n" + body)
            for i, (name, part) in enumerate([("", parts[0])]
                                             + list(zip(parts[1::2], parts[2::2]))):
                if any(e in name.lower() for e in END_MATTER):
                    continue
                if len(re.findall(r"[A-Za-z]{2,}", part)) < MIN_WORDS:
                    continue
                yield ("%s-%d" % (pageid, i), title + (" — " + name if name else ""),
                       re.sub(r"\s+", " ", part).strip())


def main():
    lines = [json.dumps({"id": i, "title": t, "text": x}, ensure_ascii=False)
             for i, t, x in sections()]
    tmp = TARGET + ".tmp"
    with open(tmp, "wb") as f:
        f.write(bz2.compress(("\n".join(lines) + "\n").encode("utf-8"), 9))
    os.replace(tmp, TARGET)
    print("wrote %s: %d sections" % (TARGET, len(lines)))


if __name__ == "__main__":
    main()
