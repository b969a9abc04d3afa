# SPDX-License-Identifier: Apache-2.0
"""Turns `floe onnx-test --json` output (stdin) into the tables of docs/onnx-conformance.md:
per suite totals, then every failing and unsupported case grouped by its reason (the op,
or the kind of error), in Markdown on stdout."""
import collections
import json
import re
import sys


def reason_key(r):
    """A short grouping key for a failure or unsupported reason."""
    m = re.search(r"op ([A-Za-z0-9_.]+) is not supported", r)
    if m:
        return f"op {m.group(1)} not implemented"
    m = re.search(r"\((\w+), opset \d+\): (.*)", r)
    if m:
        msg = re.sub(r"'[^']*'", "'…'", m.group(2))
        msg = re.sub(r"\d+", "N", msg)
        return f"{m.group(1)}: {msg[:110]}"
    m = re.search(r"element type (\w+)|data type (\w+)", r)
    if m:
        return f"data type {m.group(1) or m.group(2)} (Floe has no such dtype)"
    m = re.search(r"is (a sequence|an optional)", r)
    if m:
        return f"graph input is {m.group(1)}"
    if "elements differ" in r:
        return "wrong values"
    if "shape" in r and "expected" in r:
        return "wrong shape"
    return re.sub(r"\d+", "N", re.sub(r"'[^']*'", "'…'", r))[:120]


def main():
    cases = []
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("{"):
            continue
        o = json.loads(line)
        if "case" in o:
            cases.append(o)
    suites = collections.OrderedDict()
    for c in cases:
        s = c["case"].split("/")[0]
        suites.setdefault(s, collections.Counter())[c["result"]] += 1
    print("| suite | cases | pass | fail | unsupported | pass rate |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    tot = collections.Counter()
    for s, n in suites.items():
        t = sum(n.values())
        tot.update(n)
        print(f"| {s} | {t} | {n['pass']} | {n['fail']} | {n['unsupported']} | {100.0 * n['pass'] / t:.1f}% |")
    t = sum(tot.values())
    print(f"| **all** | {t} | {tot['pass']} | {tot['fail']} | {tot['unsupported']} | {100.0 * tot['pass'] / t:.1f}% |")
    for kind in ("fail", "unsupported"):
        groups = collections.defaultdict(list)
        for c in cases:
            if c["result"] == kind:
                groups[reason_key(c.get("reason", ""))].append(c["case"])
        print(f"\n### {'Failing' if kind == 'fail' else 'Unsupported'} cases ({sum(map(len, groups.values()))})\n")
        for key, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            short = ", ".join(n.split("/", 1)[1] for n in sorted(names))
            print(f"- **{key}** ({len(names)}): {short}")


if __name__ == "__main__":
    main()
