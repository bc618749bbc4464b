#!/usr/bin/env python3
"""tests/disable_coverage.py — CBT_DISABLE leaves nothing behind.

Reads include/cbt.h and every include/cbt/*.h but those in NOT_DISABLED
(cbt/kv_kernels.h), splits each into what it declares for every build (the
common part), what only a normal build sees (the #else of its
`#ifdef CBT_DISABLE` region) and what only a CBT_DISABLE build sees (the
stubs), and fails, naming each offender, when

  - a public function (a cbt_* declaration or inline definition outside the
    stubs) or a public function-like macro (CBT_* / cbt_*, not ending in _)
    is never called by tests/disable_all.c;
  - a function or macro a normal build declares has no stub in any header's
    CBT_DISABLE branch (a disabled build would need libcbt for it);
  - a function is declared, without a body, where a CBT_DISABLE build also
    sees it (no stub can be defined there);
  - a type, or an object-like macro, is defined only when CBT_DISABLE is not
    (a disabled program's variables and constants need them);
  - with --binary: the disabled test program references a cbt symbol
    (nm -u) or needs a cbt library (its DT_NEEDED entries);
  - with --cc: a call with arguments of the wrong type still compiles under
    CBT_DISABLE (the stubs must keep C's type checking), or a correct one
    does not.

Device-only helpers of the kernel macros (__device__ functions of the
__CUDACC__ branch) are not callable from host code and are listed, not
required. Run by ctest (tests/CMakeLists.txt); exits 1 on any failure.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

IDENT = re.compile(r"[A-Za-z_]\w*")

# Public headers CBT_DISABLE deliberately leaves alone, and so are not checked.
# cbt/kv_kernels.h: the KV-movement kernels (scatter, re-RoPE, L2 load) and
# their C references are workload code, not instrumentation; compiled to
# no-ops they would silently stop a program's KV data movement. A program
# that uses them links libcbt_kernels (and through it libcbt) whatever
# CBT_DISABLE says; their own CBT_KERNEL_SPAN instrumentation lives in
# libcbt_kernels and costs one branch when no tracer runs.
# cbt/lmct.h: a file codec, not a hot path; not part of libcbt yet (cbt/lmct.h)
NOT_DISABLED = {"cbt/kv_kernels.h", "cbt/lmct.h"}


def strip_comments(src):
    """Comments become spaces (newlines kept), string and char literals keep
    their quotes but lose their contents."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in src[i:j]))
            i = j
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def logical_lines(src):
    return src.replace("\\\n", " ").split("\n")


DISABLE_POS = re.compile(r"^(ifdef\s+CBT_DISABLE|if\s+defined\s*\(?\s*CBT_DISABLE\s*\)?)\s*$")
DISABLE_NEG = re.compile(r"^(ifndef\s+CBT_DISABLE|if\s+!\s*defined\s*\(?\s*CBT_DISABLE\s*\)?)\s*$")
CXX_POS = re.compile(r"^(ifdef\s+__cplusplus|if\s+defined\s*\(?\s*__cplusplus\s*\)?)\s*$")
ELIF_DISABLE_POS = re.compile(r"^elif\s+defined\s*\(?\s*CBT_DISABLE\s*\)?\s*$")


def classify(path):
    """Split a header into {'common', 'enabled', 'disabled'} text. The true
    branch of `#ifdef __cplusplus` is dropped (extern "C" braces, C++
    duplicates of C definitions)."""
    text = {"common": [], "enabled": [], "disabled": []}
    stack = []  # frames: [kind, branch]; kind D (CBT_DISABLE), C (__cplusplus), O (other)
    for line in logical_lines(strip_comments(open(path).read())):
        s = line.strip()
        d = s[1:].strip() if s.startswith("#") else None
        if d is not None:
            if d.startswith("if"):
                if DISABLE_POS.match(d):
                    stack.append(["D", "disabled", False])
                elif DISABLE_NEG.match(d):
                    stack.append(["D", "enabled", True])
                elif CXX_POS.match(d):
                    stack.append(["C", "cxx", False])
                else:
                    stack.append(["O", "any", False])
                continue
            if d.startswith("elif"):
                f = stack[-1]
                if f[0] == "D":
                    f[1] = "disabled" if ELIF_DISABLE_POS.match(d) else "enabled"
                else:
                    f[1] = "any"
                continue
            if d.startswith("else"):
                f = stack[-1]
                if f[0] == "D":
                    # #ifndef CBT_DISABLE ... #else: the stubs; otherwise the calls
                    f[1] = "disabled" if (f[2] and f[1] == "enabled") else "enabled"
                else:
                    f[1] = "any"
                continue
            if d.startswith("endif"):
                stack.pop()
                continue
        branches = [f[1] for f in stack]
        if "cxx" in branches:
            continue
        if "disabled" in branches:
            cls = "disabled"
        elif "enabled" in branches:
            cls = "enabled"
        else:
            cls = "common"
        text[cls].append(line)
    return {k: "\n".join(v) for k, v in text.items()}


DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)(\()?", re.M)


def macros(text):
    """(function-like, object-like) public macro names #defined in text."""
    fn, obj = set(), set()
    for m in DEFINE.finditer(text):
        name = m.group(1)
        if not re.match(r"(CBT|cbt)_", name) or name.endswith("_") or name.endswith("_H"):
            continue
        (fn if m.group(2) else obj).add(name)
    return fn, obj


def functions(text):
    """cbt_* functions named at file scope in text (preprocessor lines
    removed): {name: (has_body, device_only)}, and the names of types
    (typedefs, struct/enum/union tags with a body) defined there."""
    code = "\n".join(l for l in text.split("\n") if not l.lstrip().startswith("#"))
    found, types = {}, set()
    depth = paren = 0
    stmt_start = 0
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == "{":
            if depth == 0 and paren == 0:
                head = code[stmt_start:i]
                m = re.search(r"\b(struct|enum|union)\s+([A-Za-z_]\w*)?\s*$", head)
                if m:
                    types.add(m.group(2) or "(anonymous %s)" % m.group(1))
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                stmt_start = i + 1
        elif c == "(":
            if depth == 0 and paren == 0:
                m = re.search(r"([A-Za-z_]\w*)\s*$", code[stmt_start:i])
                head = code[stmt_start:i]
                if m and re.match(r"cbt_", m.group(1)) and not re.match(r"\s*typedef\b", head):
                    # find the matching ')' and what follows it
                    j, p = i, 0
                    while j < n:
                        if code[j] == "(":
                            p += 1
                        elif code[j] == ")":
                            p -= 1
                            if p == 0:
                                break
                        j += 1
                    rest = code[j + 1:].lstrip()
                    device = bool(re.search(r"\b__(device|global)__\b", head))
                    found[m.group(1)] = (rest.startswith("{"), device)
            paren += 1
        elif c == ")":
            paren -= 1
        elif c == ";" and depth == 0 and paren == 0:
            head = code[stmt_start:i]
            m = re.match(r"\s*typedef\b.*?\b([A-Za-z_]\w*)\s*(\)\s*\(.*\))?\s*$", head, re.S)
            if m:
                fp = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", head)
                types.add(fp.group(1) if fp else m.group(1))
            stmt_start = i + 1
        i += 1
    return found, types


def used(names, test_code):
    return {n for n in names if re.search(r"\b%s\s*\(" % re.escape(n), test_code)}


def check_binary(path, fails):
    nm = shutil.which("nm")
    if nm:
        out = subprocess.run([nm, "-u", path], capture_output=True, text=True).stdout
        refs = sorted({l.split()[-1] for l in out.splitlines() if re.search(r"\bcbt_", l)})
        for r in refs:
            fails.append(f"{path}: references the cbt symbol {r} (nm -u)")
        local = subprocess.run([nm, path], capture_output=True, text=True).stdout
        n_local = sum(1 for l in local.splitlines() if re.search(r" [tTdDbBrR] cbt_", l))
        print(f"binary: nm -u lists {len(refs)} cbt symbols; {n_local} local cbt_ copies "
              "(stubs the compiler kept out of line)")
    else:
        print("binary: nm not found, undefined-symbol check skipped")
    readelf = shutil.which("readelf")
    if readelf:
        out = subprocess.run([readelf, "-d", path], capture_output=True, text=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
        for lib in needed:
            if "cbt" in lib:
                fails.append(f"{path}: needs the library {lib} (DT_NEEDED)")
        print("binary: needs " + (", ".join(needed) or "nothing"))
    else:
        print("binary: readelf not found, DT_NEEDED check skipped")


HEADERS_C = "".join(f'#include "{h}"\n' for h in [
    "cbt.h", "cbt/blend_metrics.h", "cbt/cb.h", "cbt/context.h", "cbt/cupti.h",
    "cbt/kernel_span.h", "cbt/nvtx.h", "cbt/otlp.h", "cbt/pspan.h",
    "cbt/trace_file.h", "cbt/tree.h"])
TYPE_CASES = [  # (what, body of main): each must be refused under CBT_DISABLE -Werror
    ("a string for cbt_stream **", '(void)cbt_stream_cpu_create(0, "not a stream");'),
    ("an int for const cbt_event *", "(void)cbt_publish(42);"),
    ("one argument too many", "(void)cbt_init(NULL, 1);"),
    ("a cbt_launch_info for a const cbt_launch_info *",
     "cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, 1); cbt_kspan k;\n"
     '    (void)cbt_launch_begin(NULL, "req-1", li, &k);'),
    ("a double * for cbt_metrics *", "double d = 0; (void)cbt_metrics_get(&d);"),
]
TYPE_GOOD = ("cbt_stream *s; cbt_event e = {0}; cbt_kspan k;\n"
             "    cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, 1);\n"
             "    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);\n"
             "    (void)cbt_stream_cpu_create(0, &s); (void)cbt_publish(&e); (void)cbt_init(NULL);\n"
             '    (void)cbt_launch_begin(NULL, "req-1", &li, &k);\n'
             "    (void)cbt_metrics_get(&m);")


def check_types(cc, incs, fails):
    with tempfile.TemporaryDirectory() as d:
        def compiles(body):
            src = os.path.join(d, "t.c")
            with open(src, "w") as f:
                f.write(HEADERS_C + "int main(void)\n{\n    " + body + "\n    return 0;\n}\n")
            cmd = [cc, "-std=c11", "-Werror", "-Wall", "-DCBT_DISABLE", "-fsyntax-only", src]
            cmd += ["-I" + i for i in incs]
            return subprocess.run(cmd, capture_output=True, text=True)
        r = compiles(TYPE_GOOD)
        if r.returncode:
            fails.append("type check: the correct calls do not compile under CBT_DISABLE:\n"
                         + r.stderr)
            return
        refused = 0
        for what, body in TYPE_CASES:
            if compiles(body).returncode == 0:
                fails.append(f"type check: {what} compiles under CBT_DISABLE: {body}")
            else:
                refused += 1
        print(f"type check: the correct calls compile; {refused} of {len(TYPE_CASES)} wrongly "
              "typed ones are refused")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--include", required=True, help="the include/ directory")
    ap.add_argument("--test", required=True, help="tests/disable_all.c")
    ap.add_argument("--binary", help="the disabled test program, for nm/readelf")
    ap.add_argument("--cc", help="a C compiler, for the type-checking cases")
    ap.add_argument("--cc-include", action="append", default=[],
                    help="an include directory for --cc (repeatable)")
    a = ap.parse_args()

    headers = [os.path.join(a.include, "cbt.h")] + sorted(
        h for h in glob.glob(os.path.join(a.include, "cbt", "*.h"))
        if os.path.relpath(h, a.include).replace(os.sep, "/") not in NOT_DISABLED)
    test_code = strip_comments(open(a.test).read())
    fails = []
    public_fn, public_mac, device = {}, {}, []
    stub_fn, stub_mac, inline_everywhere = set(), set(), set()
    for h in headers:
        rel = os.path.relpath(h, os.path.dirname(a.include))
        parts = classify(h)
        com_f, com_t = functions(parts["common"])
        ena_f, ena_t = functions(parts["enabled"])
        dis_f, _ = functions(parts["disabled"])
        stub_fn |= {n for n, (body, _) in dis_f.items() if body}
        inline_everywhere |= {n for n, (body, _) in com_f.items() if body}
        for n, (body, dev) in list(com_f.items()) + list(ena_f.items()):
            if dev:
                device.append(n)
                continue
            public_fn.setdefault(n, rel)
        for n, (body, dev) in com_f.items():
            if not body and not dev:
                fails.append(f"{rel}: {n} is declared outside the header's `#ifdef CBT_DISABLE` "
                             "region, so a CBT_DISABLE build sees a declaration it cannot link: "
                             "move it into the #else and add a stub")
        for t in sorted(ena_t - com_t):
            fails.append(f"{rel}: the type {t} is defined only when CBT_DISABLE is not: "
                         "move it above the header's CBT_DISABLE region")
        com_m, com_o = macros(parts["common"])
        ena_m, ena_o = macros(parts["enabled"])
        dis_m, dis_o = macros(parts["disabled"])
        stub_mac |= dis_m
        for m in com_m | ena_m:
            public_mac.setdefault(m, rel)
        for m in sorted(ena_m - dis_m - com_m):
            fails.append(f"{rel}: the macro {m}() has no CBT_DISABLE definition")
        for m in sorted(ena_o - dis_o - com_o):
            fails.append(f"{rel}: the constant {m} is defined only when CBT_DISABLE is not")
    for n, rel in sorted(public_fn.items()):
        if n not in stub_fn and n not in inline_everywhere:
            fails.append(f"{rel}: {n} has no static inline stub under CBT_DISABLE")
    missing = sorted(set(public_fn) - used(public_fn, test_code))
    for n in missing:
        fails.append(f"{public_fn[n]}: {n}() is never called by {os.path.basename(a.test)}")
    missing_m = sorted(set(public_mac) - used(public_mac, test_code))
    for m in missing_m:
        fails.append(f"{public_mac[m]}: the macro {m}() is never used by {os.path.basename(a.test)}")

    print(f"headers: {len(headers)}; public functions: {len(public_fn)} ({len(stub_fn)} with a "
          f"CBT_DISABLE stub, {len(inline_everywhere)} inline in every build); function-like "
          f"macros: {len(public_mac)} ({len(stub_mac)} with a CBT_DISABLE definition)")
    if device:
        print("not required (device-only helpers of the kernel macros): " + ", ".join(sorted(device)))
    if a.binary:
        check_binary(a.binary, fails)
    if a.cc:
        check_types(a.cc, a.cc_include, fails)
    for f in fails:
        print("FAIL: " + f)
    if fails:
        print(f"disable_coverage: {len(fails)} failure(s)")
        return 1
    print(f"disable_coverage: every public function and macro has a CBT_DISABLE stub and is "
          f"used by {os.path.basename(a.test)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
