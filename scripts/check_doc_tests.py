"""Every test named in a doc must be a full path that exists.

Forms: `<crate>::<module>::…::<name>` (unit test, crate = lib/bin ident of a
workspace package), `e2e::<module>::<name>` (tests/e2e/<module>.rs),
`<dir>/tests/<file>.rs::<name>` (an integration test binary). `<name>` may be
`*` (the module must hold tests). Tokens in a table's `test`/`tests` column
must take one of these forms; elsewhere tokens of these forms are checked.
"""
import json, os, re, subprocess, sys

ROOT = subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip()
meta = json.loads(subprocess.check_output(["cargo", "metadata", "--no-deps", "--format-version", "1"], cwd=ROOT))
CRATES = {}
for p in meta["packages"]:
    for t in p["targets"]:
        if any(k in ("lib", "bin") for k in t["kind"]):
            CRATES[t["name"].replace("-", "_")] = os.path.dirname(t["src_path"])

def has_fn(path, name):
    src = open(path).read()
    if name == "*":
        return re.search(r"#\[(tokio::)?test", src) is not None
    return re.search(r"\bfn\s+" + re.escape(name) + r"\s*[(<]", src) is not None

def resolve(tok):
    """None if fine, else why not."""
    if ".rs::" in tok:
        f, name = tok.split(".rs::", 1)
        path = os.path.join(ROOT, f + ".rs")
        if not os.path.isfile(path):
            return f"no file {f}.rs"
        return None if has_fn(path, name) else f"no fn {name} in {f}.rs"
    segs = tok.split("::")
    if segs[0] == "e2e":
        if len(segs) != 3:
            return "e2e names are e2e::<module>::<name>"
        path = os.path.join(ROOT, "tests/e2e", segs[1] + ".rs")
        if not os.path.isfile(path):
            return f"no e2e module {segs[1]}"
        return None if has_fn(path, segs[2]) else f"no fn {segs[2]} in tests/e2e/{segs[1]}.rs"
    if segs[0] not in CRATES:
        return "not a full path (<crate>::…, e2e::…, or <file>.rs::…)"
    cur, file = CRATES[segs[0]], None
    file = next(f for f in (os.path.join(cur, "lib.rs"), os.path.join(cur, "main.rs")) if os.path.isfile(f))
    for seg in segs[1:-1]:
        for cand in (os.path.join(cur, seg + ".rs"), os.path.join(cur, seg, "mod.rs")):
            if os.path.isfile(cand):
                file, cur = cand, os.path.join(cur, seg)
                break
        else:
            if not re.search(r"\bmod\s+" + seg + r"\b", open(file).read()):
                return f"no module {seg} in {os.path.relpath(file, ROOT)}"
    return None if has_fn(file, segs[-1]) else f"no fn {segs[-1]} in {os.path.relpath(file, ROOT)}"

FORM = re.compile(r"^(?:[\w/.-]+\.rs::(?:\w+|\*)|(?:\w+::)+(?:\w+|\*))$")

def tokens(doc):
    out, test_col = [], None
    for n, line in enumerate(open(doc), 1):
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if test_col is None and cells[-1] in ("test", "tests"):
                test_col = len(cells) - 1
                continue
            if test_col is not None and not set(line.strip()) <= set("|-: "):
                # a `\|` inside a cell is not a column break
                cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
                for t in re.findall(r"`([^`]+)`", cells[-1]):
                    out.append((n, t, True))
                for c in cells[:-1]:
                    out += [(n, t, False) for t in re.findall(r"`([^`]+)`", c)]
                continue
        else:
            test_col = None
        out += [(n, t, False) for t in re.findall(r"`([^`]+)`", line)]
    return out

bad = checked = 0
for doc in sys.argv[1:]:
    for n, tok, in_test_col in tokens(doc):
        # In a test column: anything path-like or a bare test-like name
        # (three or more snake_case words); elsewhere: e2e:: and ::tests:: paths.
        if in_test_col:
            if not ("::" in tok or re.fullmatch(r"[a-z0-9]+(?:_[a-z0-9]+){2,}", tok)):
                continue
        elif not (FORM.match(tok) and (tok.startswith("e2e::") or "::tests::" in tok)):
            continue
        why = resolve(tok) if FORM.match(tok) else "not a full path (<crate>::…, e2e::…, or <file>.rs::…)"
        checked += 1
        if why:
            bad += 1
            print(f"{doc}:{n}: `{tok}`: {why}")
print(f"{checked} test names checked, {bad} bad")
sys.exit(1 if bad else 0)
