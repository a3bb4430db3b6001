#!/usr/bin/env python3
"""The options and verbs of the man pages agree with the programs' own help.

salusd --help (its one option table) against salusd(8), salusd.conf(5) and the commented
default config (tools/salusd.conf), option by option and default by default; salusctl help
against salusctl(1), verb by verb and flag by flag (the global options with their defaults),
and against docs/operating.md's verb list;
salus-sim --help against salus-sim(1) (the defaults its option lines give);
the functions of salus.h and salus_ps.h against salus.h(3) and salus_ps(3). Both ways: a page
that documents what the program does not have fails too. Each failure names the page, what
it lacks and where that comes from, one line each.

usage: man_agree.py BIN_DIR SOURCE_DIR [MAN_SOURCE_DIR]   (default: SOURCE_DIR/docs/man)
"""
import os
import re
import subprocess
import sys

BIN, SRC = sys.argv[1], sys.argv[2]
MAN = sys.argv[3] if len(sys.argv) > 3 else os.path.join(SRC, "docs", "man")
problems = []
checked = 0


def page(name):
    path = os.path.join(MAN, name + ".scd")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        problems.append(f"{name}.scd: cannot read it: {e}")
        return ""


def entries(text, section):
    """{head line's first bold word: the entry's text} of the page's section SECTION: an
    entry is a line starting with *WORD* and the tab-indented lines after it."""
    out, key, inside = {}, None, False
    for line in text.splitlines():
        if line.startswith("# "):
            inside = line == "# " + section
            key = None
            continue
        if not inside:
            continue
        m = re.match(r"^\*([^*]+)\*", line)
        if m:
            key = m.group(1)
            out.setdefault(key, "")
            out[key] += line + "\n"
        elif key is not None and (line.startswith("\t") or line == ""):
            out[key] += line + "\n"
        else:
            key = None
    return out


def run(*argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout


def check(ok, message):
    global checked
    checked += 1
    if not ok:
        problems.append(message)


# --- salusd: the option table, through --help ---------------------------------------------
helptext = run(os.path.join(BIN, "salusd"), "--help")
opts = {}
for line in helptext.splitlines():
    m = re.match(r"^  --([a-z][a-z0-9-]*)(=VALUE)?\s+(.*)$", line)
    if not m or m.group(1) in ("help", "version"):
        continue
    # the table's default, appended as " (default: X)"; a help text that ends in its own
    # "(default: words ...)" (no table default: the value depends on where salusd runs) has
    # spaces in it, a table value never does
    d = re.search(r"\(default: ([^) ]*)\)$", m.group(3))
    opts[m.group(1)] = d.group(1) if d else None
check(len(opts) >= 20, f"salusd --help lists only {len(opts)} options: {helptext[:200]}")

man8 = entries(page("salusd.8"), "OPTIONS")
man5 = entries(page("salusd.conf.5"), "OPTIONS")
conf = open(os.path.join(SRC, "tools", "salusd.conf"), encoding="utf-8").read()
for name, default in opts.items():
    e8 = man8.get("--" + name)
    check(e8 is not None, f"salusd.8.scd: lacks the option --{name} (salusd --help lists it)")
    if e8 is not None and default is not None:
        check(f"Default: *{default}*" in e8,
              f"salusd.8.scd: --{name} does not say 'Default: *{default}*' (salusd --help's default)")
    if name == "config":  # a command-line option only
        continue
    e5 = man5.get(name)
    check(e5 is not None, f"salusd.conf.5.scd: lacks the option {name} (salusd --help lists --{name})")
    if e5 is not None and default is not None:
        check(f"Default: *{default}*" in e5,
              f"salusd.conf.5.scd: {name} does not say 'Default: *{default}*' (salusd --help's default)")
    want = f"#{name} = {default}" if default is not None else f"#{name} = "
    check(re.search("^" + re.escape(want), conf, re.M) is not None,
          f"tools/salusd.conf: lacks the commented line '{want}' (salusd --help's default)")
for key in man8:
    if key.startswith("--") and key[2:] not in opts and key not in ("--help", "--version"):
        problems.append(f"salusd.8.scd: documents {key}, which salusd --help does not list")
for key in man5:
    if re.fullmatch(r"[a-z][a-z0-9-]*", key) and key not in opts:
        problems.append(f"salusd.conf.5.scd: documents {key}, which salusd --help does not list")

# --- salusctl: verbs and their flags, through help -----------------------------------------
ctl = os.path.join(BIN, "salusctl")
usage = run(ctl, "help")
verbs, globals_ = [], []
section = None
for line in usage.splitlines():
    if line in ("Verbs:", "Options:"):
        section = line
    elif section == "Verbs:" and re.match(r"^  [a-z]", line):
        verbs.append(line.split()[0])
    elif section == "Options:" and re.match(r"^  --", line):
        d = re.search(r"\(default:? ([^) ]*)\)$", line)
        globals_.append((line.split()[0], d.group(1) if d else None))
check(len(verbs) >= 10, f"salusctl help lists only {len(verbs)} verbs: {usage[:200]}")
man1 = entries(page("salusctl.1"), "OPTIONS")
man1.update(entries(page("salusctl.1"), "VERBS"))
for flag, default in globals_:
    check(flag in man1, f"salusctl.1.scd: lacks the global option {flag} (salusctl help lists it)")
    if flag in man1 and default is not None:
        check(f"Default: *{default}*" in man1[flag],
              f"salusctl.1.scd: {flag} does not say 'Default: *{default}*' (salusctl help's default)")
for verb in verbs:
    e = man1.get(verb)
    check(e is not None, f"salusctl.1.scd: lacks the verb {verb} (salusctl help lists it)")
    if e is None:
        continue
    line = run(ctl, "help", verb).splitlines()[0]
    for flag in sorted(set(re.findall(r"(?<![a-z])-{1,2}[a-z][a-z-]*", line))):
        check(re.search(r"\*" + re.escape(flag) + r"\*", e) is not None,
              f"salusctl.1.scd: the verb {verb} lacks {flag} (salusctl help {verb}: {line.strip()})")
for key in man1:
    if re.fullmatch(r"[a-z][a-z-]*", key) and key not in verbs:
        problems.append(f"salusctl.1.scd: documents the verb {key}, which salusctl help does not list")

# --- docs/operating.md's verb list (the indented block under 'build/bin/salusctl [--socket
# PATH] ... VERB'): its head names every global option, the list every verb of salusctl help
# and each flag its help line names (--json is the head's; submit's [OPTS] are run's)
ops = open(os.path.join(SRC, "docs", "operating.md"), encoding="utf-8").read().splitlines()
head = [k for k, l in enumerate(ops) if l.startswith("    build/bin/salusctl [--socket PATH]")]
check(len(head) == 1, "docs/operating.md: no verb list under 'build/bin/salusctl [--socket PATH]'")
for flag, _ in globals_ if head else []:
    check(f"[{flag}" in ops[head[0]],
          f"docs/operating.md: its verb list's head lacks the global option {flag} (salusctl help lists it)")
listed, key = {}, None
for line in ops[head[0] + 1:] if head else []:
    if not line.startswith("      "):
        break
    m = re.match(r"^      ([a-z][a-z-]*)((?: \| [a-z][a-z-]*)*)", line)
    if m:
        key = m.group(1)
        for name in [m.group(1)] + re.findall(r"[a-z][a-z-]*", m.group(2)):
            listed[name] = key
        listed.setdefault(key, key)
    if key is not None:
        listed["text:" + key] = listed.get("text:" + key, "") + line + "\n"
for verb in verbs:
    check(verb in listed, f"docs/operating.md: its verb list lacks {verb} (salusctl help lists it)")
    if verb not in listed:
        continue
    text = listed["text:" + listed[verb]] + (listed.get("text:run", "") if verb == "submit" else "")
    line = run(ctl, "help", verb).splitlines()[0]
    for flag in sorted(set(re.findall(r"(?<![a-z])-{1,2}[a-z][a-z-]*", line)) - {"--json"}):
        check(re.search(r"(?<![a-z-])" + re.escape(flag) + r"(?![a-z-])", text) is not None,
              f"docs/operating.md: its verb list's {verb} lacks {flag} (salusctl help {verb}: {line.strip()})")
for name in listed:
    if not name.startswith("text:") and name not in verbs:
        problems.append(f"docs/operating.md: its verb list has {name}, which salusctl help does not list")

# --- salus-sim -------------------------------------------------------------------------------
sim = os.path.join(BIN, "salus-sim")
if os.path.exists(sim):
    manS = entries(page("salus-sim.1"), "OPTIONS")
    simhelp = run(sim, "--help")
    simopts = set(re.findall(r"^\s+(?:-h, )?(--[a-z][a-z-]*)", simhelp, re.M))
    for o, default in re.findall(r"^\s+(--[a-z][a-z-]*)\b.*\(default:? ([^) ]+)\)$", simhelp, re.M):
        check(o in manS and f"Default: *{default}*" in manS[o],
              f"salus-sim.1.scd: {o} does not say 'Default: *{default}*' (salus-sim --help's default)")
    check(len(simopts) >= 8, f"salus-sim --help lists only {len(simopts)} options")
    for o in sorted(simopts):
        check(o in manS, f"salus-sim.1.scd: lacks the option {o} (salus-sim --help lists it)")
    for key in manS:
        if key.startswith("--") and key not in simopts:
            problems.append(f"salus-sim.1.scd: documents {key}, which salus-sim --help does not list")

# --- the C APIs --------------------------------------------------------------------------------
for header, name in (("salus.h", "salus.h.3"), ("salus_ps.h", "salus_ps.3")):
    text = open(os.path.join(SRC, "libsalus-client", "include", header), encoding="utf-8").read()
    funcs = re.findall(r"^static inline [^(]*?\b(salus_[a-z_]+)\(", text, re.M)
    check(len(funcs) >= 3, f"{header}: found only {funcs}")
    man = page(name)
    for fn in funcs:
        check(f"*{fn}*(" in man, f"{name}.scd: lacks the function {fn} ({header} declares it)")
        check(re.search(r"\b" + fn + r"\(", man.split("# DESCRIPTION")[0]) is not None,
              f"{name}.scd: its SYNOPSIS lacks {fn} ({header} declares it)")

for p in problems:
    print("FAIL:", p)
print(f"man_agree: {checked} checks, {len(problems)} failed ({len(opts)} salusd options, "
      f"{len(verbs)} salusctl verbs)")
sys.exit(1 if problems else 0)
