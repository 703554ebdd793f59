"""Reuters-21578 (../shared/data) article bodies as text files."""
import os
import re

from helpers.paths import shared_path


def reuters_texts(folder, n, start=0):
    """``n`` real Reuters-21578 article bodies (reut2-000.sgm) as text files in ``folder``."""
    sgm = shared_path("reuters21578", "reut2-000.sgm")
    text = open(sgm, encoding="latin-1").read()
    bodies = [re.sub(r"&#\d+;", " ", b) for b in re.findall(r"<BODY>(.*?)</BODY>", text, re.S)]
    os.makedirs(folder, exist_ok=True)
    out = []
    for i, body in enumerate(bodies[start:start + n]):
        p = os.path.join(folder, "r%03d.txt" % (start + i))
        with open(p, "w") as f:
            f.write(body)
        out.append(p)
    return out
