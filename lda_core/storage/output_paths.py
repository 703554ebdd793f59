"""Where a command may write, and what ``--overwrite`` may remove: the output rules of every
writing command (vectorize, synth, infer, train, stream, export, report), in one place.

1. **Outputs never touch inputs** (:func:`check_disjoint`): an output is never an input, never
   contains one and never lies inside one. Local paths are compared after resolving ``~``,
   relative parts and symlinks (``os.path.realpath``); object-store URLs by their normalised
   prefix (scheme and bucket lower-cased, repeated and trailing ``/`` dropped); a glob by the
   folder before its first wildcard.
2. **One kind per directory** (:func:`check_kind`): a dataset directory (``manifest.json``), a
   model directory (``checkpoints/``, ``run_log.jsonl``) and an inference directory (its
   summary) are never written into one another, so ``train --output`` into a dataset cannot
   replace the dataset's ``vocab.tsv``.
3. **``--overwrite`` removes only what the output's own listing names** (:func:`clear_output`):
   the files a published manifest or summary lists, and the listing itself; a directory
   holding anything else is refused with one line naming the first such file. A directory
   whose writer was killed before publishing (no listing) is recognised by the marker
   :data:`MARKER_FILE` the writer put into it while it was still empty; only then are the
   unlisted files of that writer's layout (:data:`LAYOUTS`) removed, and again nothing else.
4. Every directory writer marks its output (:func:`mark_output`) before writing into it, holds
   the lease (:mod:`lda_core.storage.lease`) while it writes, and publishes its listing last;
   readers accept only published outputs.

No Beam here: local paths go through :class:`~lda_core.storage.files.LocalFiles`, URLs through
the file layer registered for their scheme.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
from typing import Iterable, List, Optional, Sequence, Tuple

from lda_core.errors import OutputError
from lda_core.storage.files import files_for, path_scheme

MARKER_FILE = ".ldabeam-output.json"   # hidden: Parquet dataset readers skip names with '.'
LEASE_FILE = "lease.json"              # lda_core.storage.lease.LEASE_FILE (not imported: cycle)
DATASET_MANIFEST = "manifest.json"
SUMMARY_FILE = "_summary.json"         # infer; '_': pyarrow's directory reader skips it
LEGACY_SUMMARY_FILE = "summary.json"
MODEL_MARKS = ("checkpoints", "run_log.jsonl")
LABELS_FILE = "topic_labels.json"      # a model's topic labels (ldabeam topics --label)

# What each kind of writer may leave in its directory before it publishes its listing: the
# top-level names (a trailing "/" for a folder) and name prefixes it creates.
LAYOUTS = {
    "dataset": {"names": ("train/", "heldout/", "deadletter/", "vocab.tsv", DATASET_MANIFEST,
                          "planted_topics.npy"), "prefixes": ()},
    "inference": {"names": (SUMMARY_FILE, LEGACY_SUMMARY_FILE), "prefixes": ("part-",)},
}
# a temporary sibling of an atomic write or directory publish (lda_core.storage.files)
_TEMP = re.compile(r"^\.(.+)\.(?:tmp|old)-[0-9a-f]{32}$")
# the kind of output each writing command produces
COMMAND_KINDS = {"ldabeam vectorize": "dataset", "ldabeam synth": "dataset",
                 "ldabeam infer": "inference", "ldabeam train": "model",
                 "ldabeam stream": "model"}
_KIND_NAMES = {"dataset": "a dataset", "model": "a model", "inference": "inference results"}


# ----------------------------------------------------------------------------- paths

def _is_url(p: str) -> bool:
    return path_scheme(p) not in (None, "file")


def _split_glob(path: str):
    """``(folder, pattern parts)``: the folder before the first wildcard and the rest of a glob
    split at ``/`` (``[]`` for a plain path)."""
    p = str(path)
    if not any(ch in p for ch in "*?["):
        return p, []
    first = min(p.index(ch) for ch in "*?[" if ch in p)
    cut = p.rfind("/", 0, first) + 1
    return (p[:cut] or "."), [x for x in p[cut:].split("/") if x]


def normalise(path: str) -> str:
    """The comparable form of ``path``, ending in ``/``: a local path resolved (``~``,
    relative parts, symlinks), a URL with its scheme and bucket lower-cased and its repeated
    and trailing slashes dropped. A glob is cut back to the folder before its first
    wildcard."""
    p = _split_glob(path)[0]
    if _is_url(p):
        scheme, rest = p.split("://", 1)
        parts = [s for s in rest.split("/") if s]
        if parts:
            parts[0] = parts[0].lower()
        return "%s://%s/" % (scheme.lower(), "/".join(parts))
    if p.startswith("file://"):
        p = p[len("file://"):]
    return os.path.join(os.path.realpath(os.path.expanduser(p)), "")


def _glob_reaches(pattern: List[str], rel: List[str]) -> bool:
    """True when a glob whose parts below its folder are ``pattern`` can match the path
    ``rel`` (parts below the same folder), one of its folders, or something inside it."""
    if "**" in pattern:
        return True
    n = min(len(pattern), len(rel))
    return all(fnmatch.fnmatchcase(rel[i], pattern[i]) for i in range(n))


def _flatten(inputs) -> List[str]:
    out = []
    for src in inputs or ():
        if isinstance(src, (list, tuple)):
            out.extend(_flatten(src))
        elif src:
            out.append(str(src))
    return out


def check_disjoint(output: str, inputs: Iterable, option: str = "--output",
                   fix: str = "choose an --output outside every input") -> None:
    """OutputError when ``output`` is, contains or lies inside one of ``inputs`` (paths,
    URLs or globs; lists are flattened, ``None`` ignored). Run before anything is written."""
    out = normalise(output)
    for src in _flatten(inputs):
        inp = normalise(src)
        pattern = _split_glob(src)[1]
        if out == inp:
            how = "is the input"
        elif inp.startswith(out):
            how = "contains the input"
        elif out.startswith(inp) and (not pattern or _glob_reaches(
                pattern, [x for x in out[len(inp):].split("/") if x])):
            how = "lies inside the input"
        else:
            continue
        raise OutputError("%s %s %s %s: an output never touches its inputs (the next run would "
                          "read it back, --overwrite would delete it); %s"
                          % (option, output, how, src, fix))


# ----------------------------------------------------------------------------- kinds

def _layer(path: str):
    return files_for(path)


def _read_json(files, path: str) -> Optional[dict]:
    try:
        with files.open_read(path) as f:
            data = json.loads(f.read(64 << 20).decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise OutputError("%s is not readable JSON (%s); it cannot tell what the directory "
                          "holds -- choose another --output or remove the directory by hand"
                          % (path, e)) from e
    return data if isinstance(data, dict) else {}


def summary_path(output: str, files=None) -> Optional[str]:
    """The published summary of an inference directory (new name first, then the legacy
    ``summary.json``), or None."""
    files = files or _layer(output)
    for name in (SUMMARY_FILE, LEGACY_SUMMARY_FILE):
        p = files.join(output, name)
        if files.exists(p):
            return p
    return None


def kind_of(output: str, files=None) -> Optional[str]:
    """What the directory ``output`` holds: "dataset", "model", "inference" (published or
    marked by its writer), or None (absent, empty or anything else)."""
    files = files or _layer(output)
    if not files.isdir(output):
        return None
    if files.exists(files.join(output, DATASET_MANIFEST)):
        return "dataset"
    if any(files.exists(files.join(output, m)) for m in MODEL_MARKS):
        return "model"
    if summary_path(output, files) is not None:
        return "inference"
    marker = _read_json(files, files.join(output, MARKER_FILE))
    if marker:
        return marker.get("kind")
    return None


def check_kind(output: str, kind: str, option: str = "--output") -> None:
    """OutputError when ``output`` holds another kind of output than ``kind`` (a model is
    never written into a dataset directory, nor a dataset into a model directory, ...)."""
    have = kind_of(output)
    if have is not None and have != kind:
        raise OutputError("%s %s holds %s, not %s; choose an empty or new directory"
                          % (option, output, _KIND_NAMES.get(have, have),
                             _KIND_NAMES.get(kind, kind)))


# ----------------------------------------------------------------------------- listings

def listed_files(output: str, kind: str, files=None) -> Optional[List[str]]:
    """The files (relative, ``/``-separated) the published listing of ``output`` names,
    the listing itself included; None when nothing is published."""
    files = files or _layer(output)
    if kind == "dataset":
        m = _read_json(files, files.join(output, DATASET_MANIFEST))
        if m is None:
            return None
        names = [DATASET_MANIFEST]
        for split in (m.get("splits") or {}).values():
            if isinstance(split, dict):
                names += [s.get("file") for s in split.get("shards") or ()
                          if isinstance(s, dict)]
        names.append((m.get("vocabulary") or {}).get("file"))
        names += list((m.get("deadletter") or {}).get("files") or ())
        names += list(m.get("extra_files") or ())
        if isinstance(m.get("synthetic"), dict) and "extra_files" not in m:
            names.append("planted_topics.npy")     # an older synth manifest names it in prose
        return [n for n in names if isinstance(n, str) and n]
    if kind == "inference":
        p = summary_path(output, files)
        if p is None:
            return None
        s = _read_json(files, p) or {}
        names = [files.basename(p)]
        for f in s.get("files") or ():
            if isinstance(f, str):
                names.append(f)
                if f.endswith(".parquet"):
                    names.append(f[:-len(".parquet")] + ".csv")   # its --csv twin
        return names
    raise ValueError("unknown output kind %r" % kind)


def _walk(files, root: str) -> List[str]:
    """Every file under ``root`` (relative, ``/``-separated); a symlink counts as a file and
    is never followed."""
    out = []
    if not _is_url(root):
        for d, dirs, fnames in os.walk(root):
            rel = os.path.relpath(d, root)
            for n in fnames + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
                out.append(n if rel == "." else "%s/%s" % (rel.replace(os.sep, "/"), n))
        return sorted(out)
    for name in files.listdir(root):
        p = files.join(root, name)
        if files.exists(p) and not files.isdir(p):
            out.append(name)
        else:
            out += ["%s/%s" % (name, r) for r in _walk(files, p)]
    return sorted(out)


def _in_layout(rel: str, kind: str) -> bool:
    layout = LAYOUTS[kind]
    top = rel.split("/", 1)[0]
    if "/" in rel:
        return top + "/" in layout["names"]
    m = _TEMP.match(top)
    base = m.group(1) if m else top
    return base in layout["names"] or base.startswith(tuple(layout["prefixes"]))


def _is_temp_of(rel: str, keep: set) -> bool:
    """A leftover temporary sibling (killed atomic write) of a listed file."""
    head, _, name = rel.rpartition("/")
    m = _TEMP.match(name)
    return bool(m) and ((head + "/" if head else "") + m.group(1)) in keep


def clear_output(output: str, kind: str, overwrite: bool, option: str = "--output") -> None:
    """Make ``output`` ready for a fresh ``kind`` output (rule 3 of the module docstring):
    absent or empty -> nothing to do; holding a published output -> with ``overwrite`` its
    listed files are removed, else OutputError; holding anything not listed (not ours) ->
    OutputError naming it. The lease file and the marker are left alone."""
    files = _layer(output)
    if not files.isdir(output):
        return
    present = [r for r in _walk(files, output) if r not in (LEASE_FILE, MARKER_FILE)
               and not r.startswith(LEASE_FILE + ".")]
    # a writer killed while marking the folder left the marker's temporary sibling: ours,
    # never data (a fixed name and 32 hex digits), and it marks nothing, so it goes
    for r in [r for r in present if _is_temp_of(r, {MARKER_FILE})]:
        files.remove_file(files.join(output, r))
        present.remove(r)
    if not present:
        return
    have = kind_of(output, files)
    if have is not None and have != kind:
        check_kind(output, kind, option)
    listed = listed_files(output, kind, files)
    if listed is not None:
        keep = set(listed)
        owned = [r for r in present if r in keep or _is_temp_of(r, keep)]
        what = "a dataset" if kind == "dataset" else "inference results"
    elif have == kind:          # marked by a writer of this kind that did not publish
        owned = [r for r in present if _in_layout(r, kind)]
        what = "unpublished %s (its writer stopped before publishing)" % (
            "inference results" if kind == "inference" else "dataset files")
    else:
        owned = []
        what = None
    foreign = [r for r in present if r not in owned]
    if foreign:
        raise OutputError("%s %s holds %s that this command did not write (%s%s); "
                          "choose an empty or new directory -- --overwrite removes only "
                          "the files an output's own %s lists"
                          % (option, output, "a file" if len(foreign) == 1 else
                             "%d files" % len(foreign), foreign[0],
                             ", ..." if len(foreign) > 1 else "",
                             "manifest" if kind == "dataset" else "summary"))
    if not overwrite:
        raise OutputError("%s %s already holds %s; pass --overwrite to replace it or choose "
                          "another %s" % (option, output, what, option))
    # the listing first: from here on the directory no longer looks published
    first = [r for r in owned if r in (DATASET_MANIFEST, SUMMARY_FILE, LEGACY_SUMMARY_FILE)]
    for rel in first + [r for r in owned if r not in first]:
        files.remove_file(files.join(output, *rel.split("/")))
    if not _is_url(output):
        for d, _dirs, _f in sorted(os.walk(output), key=lambda t: -len(t[0])):
            if d != output and not os.listdir(d):
                os.rmdir(d)


def mark_output(output: str, kind: str, owner: str) -> None:
    """Create ``output`` (when absent) and put the marker in it: the directory now belongs to
    a ``kind`` writer, whose unpublished leftovers a later ``--overwrite`` may remove."""
    files = _layer(output)
    if not _is_url(output):
        os.makedirs(output, exist_ok=True)
    files.write_atomic(files.join(output, MARKER_FILE),
                       (json.dumps({"kind": kind, "writer": owner}) + "\n").encode("utf-8"))


# ----------------------------------------------------------------------------- placement

def _ancestors(path: str) -> List[str]:
    """The folders above ``path``, nearest first: locally resolved (``~``, relative parts,
    symlinks) up to ``/``; for a URL its prefixes down to the bucket."""
    if _is_url(path):
        scheme, rest = path.split("://", 1)
        parts = [s for s in rest.split("/") if s]
        return ["%s://%s" % (scheme, "/".join(parts[:i])) for i in range(len(parts) - 1, 0, -1)]
    p = os.path.realpath(os.path.expanduser(path[len("file://"):] if path.startswith("file://")
                                            else path))
    out = []
    while True:
        up = os.path.dirname(p)
        if up == p:
            return out
        out.append(up)
        p = up


def _is_json_with(files, path: str, keys: Sequence[str]) -> bool:
    """``path`` is a JSON object holding one of ``keys`` (an unreadable file is not)."""
    try:
        data = _read_json(files, path)
    except OutputError:
        return False
    return isinstance(data, dict) and any(k in data for k in keys)


def output_kind_of(folder: str, files=None) -> Optional[str]:
    """What ``folder`` holds when it is an output of ldabeam: "dataset", "model" or
    "inference"; None otherwise. Stricter than :func:`kind_of` (which judges a directory
    a command is about to write into): a folder only *named* like one (a ``manifest.json``
    of another program, a ``checkpoints/`` of another trainer) is not an output, so an
    output placed below it is not refused for that."""
    files = files or _layer(folder)
    if not files.isdir(folder):
        return None
    marker = files.join(folder, MARKER_FILE)
    if files.exists(marker):
        try:
            kind = (_read_json(files, marker) or {}).get("kind")
        except OutputError:
            kind = None
        if kind in _KIND_NAMES:
            return kind
    if files.exists(files.join(folder, DATASET_MANIFEST)) and _is_json_with(
            files, files.join(folder, DATASET_MANIFEST), ("splits",)):
        return "dataset"
    if files.exists(files.join(folder, "checkpoints", "LATEST")) or files.exists(
            files.join(folder, "run_log.jsonl")):
        return "model"
    if files.exists(files.join(folder, SUMMARY_FILE)) or (
            files.exists(files.join(folder, LEGACY_SUMMARY_FILE)) and _is_json_with(
                files, files.join(folder, LEGACY_SUMMARY_FILE), ("files",))):
        return "inference"
    return None


def enclosing_output(path: str) -> Optional[Tuple[str, str]]:
    """``(folder, kind)`` of the nearest folder above ``path`` that is an output of ldabeam
    (:func:`output_kind_of`), or None."""
    for folder in _ancestors(path):
        kind = output_kind_of(folder)
        if kind is not None:
            return folder, kind
    return None


def check_not_inside_output(output: str, option: str = "--output") -> None:
    """OutputError when ``output`` lies inside a dataset, a model or inference results: an
    output never overlaps another output (a report written over a dataset's shard, an
    inference folder among a model's checkpoints, a model saved into a split folder)."""
    found = enclosing_output(output)
    if found is not None:
        folder, kind = found
        raise OutputError("%s %s lies inside %s (%s): an output never overlaps a dataset, a "
                          "model or another output (its readers would find a file they did "
                          "not expect, its --overwrite would delete yours); choose an %s "
                          "outside it" % (option, output, _KIND_NAMES[kind], folder, option))


def check_place(output: str, kind: str, option: str = "--output") -> None:
    """Where a ``kind`` directory writer may write: ``output`` holds no other kind of output
    (:func:`check_kind`) and lies inside no output (:func:`check_not_inside_output`)."""
    check_kind(output, kind, option)
    check_not_inside_output(output, option)


# ----------------------------------------------------------------------------- file outputs

REPORT_MARK = "<!-- written by ldabeam report -->"
PYLDAVIS_NAMES = ("pyldavis.npz", "pyldavis.json", "pyldavis.html")
_NPY_MAGIC = b"\x93NUMPY"
_TOPICS_TABLE = re.compile(rb"^[A-Za-z0-9_.-]+, K=\d+, step \d+, \d+ documents seen\r?\n")
_FILE_KIND_NAMES = {"phi-npy": "a topic-word matrix (.npy)", "gensim": "a gensim model export",
                    "report": "an ldabeam report page", "topics": "a topics listing",
                    "pyldavis": "pyLDAvis data"}


def _head_tail(files, path: str, n: int = 4096):
    """The first ``n`` and the last 256 bytes of a regular file (the same bytes when short)."""
    with files.open_read(path) as f:
        head = f.read(n)
        size = files.size(path)
        if size <= n:
            return head, head[-256:]
        f.seek(max(0, size - 256))
        return head, f.read(256)


def file_kind(path: str, files=None) -> Optional[str]:
    """Which ldabeam file output ``path`` holds, told by its content: "phi-npy" (a 2-D
    float64 ``.npy``), "gensim" (a pickle naming gensim's classes, or a ``.npy`` side file of
    one: its name tells), "report" (a page ending in :data:`REPORT_MARK`), "topics" (the
    table, CSV or JSON of ``ldabeam topics``); None for anything else. Nothing is
    unpickled: a pickle is recognised by its first bytes. The files of ``export --format
    pyldavis`` are "pyldavis" by their names."""
    files = files or _layer(path)
    try:
        head, tail = _head_tail(files, path)
    except (OSError, ValueError):
        return None
    if files.basename(path) in PYLDAVIS_NAMES:
        return "pyldavis"     # the names of `export --format pyldavis` in its folder
    if head.startswith(_NPY_MAGIC):
        try:
            fields = head[10:10 + int.from_bytes(head[8:10], "little")].decode("latin-1")
        except (ValueError, UnicodeDecodeError):
            return None
        if "'descr': '<f8'" in fields and re.search(r"'shape': \(\d+, \d+\)", fields):
            return "phi-npy"
        return None
    if head[:1] == b"\x80" and b"gensim." in head:
        return "gensim"
    if REPORT_MARK.encode("ascii") in tail:
        return "report"
    if (head.startswith(b"topic,label,rank,word,weight") or _TOPICS_TABLE.match(head)
            or re.match(rb'^\[\s*(\]|\{\s*"topic": \d+,\s*"label")', head)):
        return "topics"
    return None


def check_file_output(path: str, kind: str, inputs: Sequence = (), overwrite: bool = False,
                      option: str = "--output", side_files: Sequence[str] = ()) -> List[str]:
    """The output rules for a file output (``export``, ``report``, ``topics --output``),
    before anything is written: ``path`` never overlaps an input (:func:`check_disjoint`)
    nor lies inside a dataset, a model or inference results
    (:func:`check_not_inside_output`); an existing file is replaced only with ``overwrite``
    and only when it is the same ``kind`` of output (:func:`file_kind`), never a directory,
    a link or a special file. ``side_files``: the other files the output writes beside
    ``path`` (gensim's), checked alike (a ``.npy`` among them belongs to the output). Returns
    the existing files of the output (``path`` first when present)."""
    check_disjoint(path, inputs, option)
    check_not_inside_output(path, option)
    files = _layer(path)
    local = not _is_url(path)
    if local and os.path.isdir(path):
        raise OutputError("%s %s: Is a directory; give the path of a file (%s is one file)"
                          % (option, path, _FILE_KIND_NAMES.get(kind, kind)))
    found = []
    for p in [path] + list(side_files):
        if local and not os.path.lexists(p):
            continue
        if not local and not files.exists(p):
            continue
        if local and (os.path.islink(p) or not os.path.isfile(p)):
            raise OutputError("%s %s: %s is %s, not a file this command wrote; an output never "
                              "replaces one -- choose another path"
                              % (option, path, p, "a symbolic link" if os.path.islink(p)
                                 else "a directory" if os.path.isdir(p) else "a special file"))
        have = file_kind(p, files)
        if p != path and p.endswith(".npy") and have in (None, "phi-npy"):
            have = kind           # the arrays an export stores beside its main file
        if have != kind:
            raise OutputError("%s %s: %s holds %s, not %s; an existing file is replaced only "
                              "by the same kind of output -- choose another path"
                              % (option, path, p, _FILE_KIND_NAMES.get(have, "a file ldabeam "
                                                                              "did not write"),
                                 _FILE_KIND_NAMES.get(kind, kind)))
        found.append(p)
    if found and not overwrite:
        raise OutputError("%s %s already holds %s%s; pass --overwrite to replace it or choose "
                          "another path" % (option, path, _FILE_KIND_NAMES.get(kind, kind),
                                            "" if found == [path] else
                                            " (%d files)" % len(found)))
    return found


def check_not_link(path: str, what: str) -> None:
    """OutputError when the local ``path`` (a file a command appends to or replaces) is a
    symbolic link: writing would follow it out of the directory."""
    if not _is_url(path) and os.path.islink(path):
        raise OutputError("%s %s is a symbolic link (to %s); a %s is never written through a "
                          "link -- replace the link by the file itself or remove it"
                          % (what, path, os.readlink(path), what))


def prepare_output(output: str, kind: str, owner: str, inputs: Sequence = (),
                   overwrite: bool = False, option: str = "--output") -> None:
    """Every check and step before a ``kind`` writer writes into ``output``:
    :func:`check_disjoint`, :func:`check_not_inside_output`, :func:`clear_output`,
    :func:`mark_output`."""
    check_disjoint(output, inputs, option)
    check_not_inside_output(output, option)
    clear_output(output, kind, overwrite, option)
    mark_output(output, kind, owner)
