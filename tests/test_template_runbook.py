"""docs/cluster.md's runbook table is what ``benchmarks/cluster_model.py --runbook`` computes
from the code's own model (pipelines/training/remote_defaults.py, the functions behind
``ldabeam train --plan`` and the remote defaults), so a change of the model or its measured
constants that moves a time or a price fails here until the table is regenerated."""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from benchmarks import cluster_model as cm  # noqa: E402


def _table():
    text = open(os.path.join(REPO, "docs", "cluster.md"), encoding="utf-8").read()
    body = text[text.index("## Runbook"):text.index("## 1. Worker packaging")]
    rows = [l for l in body.splitlines() if l.startswith("| ") and "---" not in l]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows]


def test_the_runbook_table_is_the_models():
    rows = _table()
    assert [h for h in rows[0][1:]] == [p[0] for p in cm.RUNBOOK_PLACES]
    res = cm.runbook()
    assert res["algorithm"] == "scvb0" and len(rows) - 1 == len(res["rows"])
    for cells, row in zip(rows[1:], res["rows"]):
        for cell, place in zip(cells[1:], row["places"]):
            want = cm._hours(place["seconds"])
            if place["usd"] is not None:
                want += ", $%.2f" % place["usd"]
            assert cell.startswith(want), (row["corpus"], place["place"], cell, want)
            if "P" in place:     # Dataflow: the remote defaults' own choice
                m = re.search(r"S=(\d+), P=B=(\d+), s=(\d)", cell)
                assert m and (int(m.group(1)), int(m.group(2)), int(m.group(3))) == (
                    place["S"], place["P"], place["staleness"]) and place["B"] == place["P"], \
                    cell
