#!/usr/bin/env python3
"""The benchmark report: header, table, targets verdict and every repetition's time.

Usage: report.py RUN_META RAW_TSV COMMANDS_TSV TARGETS_TSV > results.txt
       report.py --check COMMANDS_TSV TARGETS_TSV   (the data files parse; run before measuring)

RUN_META     key=value lines from Benchmarks/run (date, command, load, versions, …; one
             corpus=PATH line per corpus .meta file of Benchmarks/lib/corpus.sh)
RAW_TSV      id, round, wall microseconds, peak RSS KiB — one line per run; round 0 is the
             warm-up and is not counted
COMMANDS_TSV Benchmarks/commands.tsv    TARGETS_TSV Benchmarks/targets.tsv
"""
import os
import platform
import statistics
import sys


def key_values(path):
    """key=value lines; a repeated key keeps every value, in order."""
    values = {}
    for line in open(path, encoding="utf-8"):
        key, sep, value = line.rstrip("\n").partition("=")
        if sep:
            values.setdefault(key, []).append(value)
    return values


def tsv_rows(path, columns):
    rows = []
    for line in open(path, encoding="utf-8"):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.rstrip("\n").split("\t", columns - 1)
        if len(fields) != columns:
            sys.exit("report.py: %s: expected %d tab-separated columns: %r" % (path, columns, line))
        rows.append(fields)
    return rows


def load_commands(path):
    return {c[0]: dict(corpus=c[1], output=c[2], writes=c[3], what=c[4], command=c[5]) for c in tsv_rows(path, 6)}


def load_targets(path, commands):
    """(kind, check, [NUM, DEN] or [], op, value, meaning) per line; exits on a bad line."""
    targets = []
    for kind, check, op, value, meaning in tsv_rows(path, 5):
        rss_corpus = check.partition(":")[2] if check.startswith("rss") else None
        named = [] if rss_corpus is not None else check.split("/")
        try:
            value = float(value)
        except ValueError:
            value = None
        if value is None or op not in (">=", "<=") or kind not in ("target", "context") \
                or len(named) not in (0, 2) or any(n not in commands for n in named) \
                or (rss_corpus is not None and check != "rss" and not check.startswith("rss:")):
            sys.exit("report.py: %s: bad line (kind target|context; check NUM/DEN of rows in commands.tsv, "
                     "or rss, or rss:CORPUS; op >= or <=; a number): %s" % (path, "\t".join((kind, check, op, str(value), meaning))))
        targets.append((kind, check, named, op, value, meaning))
    return targets


def machine():
    def first(path, prefix):
        try:
            for line in open(path):
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "?"
    mem = first("/proc/meminfo", "MemTotal")
    mem = "%.1f GiB" % (int(mem.split()[0]) / 1048576) if mem != "?" else "?"
    return "nproc=%d; CPU: %s; RAM %s; %s %s" % (
        len(os.sched_getaffinity(0)), first("/proc/cpuinfo", "model name"), mem, platform.system(), platform.release())


def main(meta_path, raw_path, commands_path, targets_path):
    meta = key_values(meta_path)
    one = lambda key: meta.get(key, ["?"])[0]
    corpora = {}
    for path in meta.get("corpus", []):
        corpus = {k: v[0] for k, v in key_values(path).items()}
        corpora[corpus["name"]] = corpus
    commands = load_commands(commands_path)
    runs = {}   # id -> [(round, seconds, rss MiB)], in the order the rows ran
    for name, rnd, us, rss in tsv_rows(raw_path, 4):
        runs.setdefault(name, []).append((int(rnd), int(us) / 1e6, int(rss) / 1024))

    out = []
    p = out.append
    p("Sluice benchmark results")
    p("date:      " + one("date"))
    p("command:   " + one("command"))
    p("mode:      " + one("mode"))
    if one("note") not in ("", "?"):
        p("note:      " + one("note"))
    p("machine:   " + machine())
    load_start, nproc = one("load_start"), len(os.sched_getaffinity(0))
    busy = float(load_start.split()[0]) > 0.5 * nproc if load_start != "?" else False
    p("load avg:  %s at start, %s at end%s" % (load_start, one("load_end"),
                                               "  (busy machine: figures are noisy)" if busy else ""))
    p("uptime:    start: %s" % one("uptime_start").strip())
    p("           end:   %s" % one("uptime_end").strip())
    for i, (name, c) in enumerate(corpora.items()):
        raw, size = int(c["raw_bytes"]), int(c["bytes"])
        suffix = os.path.splitext(c["file"])[1]
        p("%s%s: %d bytes %s (%s MiB) -> %d bytes %s (%.1f%%)" % (
            "corpus:    " if i == 0 else "           ", name, raw, c["content"], c["size_mib"], size,
            c["format"], 100 * size / raw))
        p("           sha256 %s %s" % (suffix, c["sha256"]))
        p("           sha256 raw %s" % c["raw_sha256"])
    p("server:    " + one("server"))
    p("versions:  " + one("versions"))
    p("method:    %s timed repetitions per command, interleaved round-robin, after one" % one("runs"))
    p("           untimed warm-up round; every output checked by sha256 in the warm-up and")
    p("           in repetition 1; wall time from the shell clock (us), peak RSS from")
    p("           /usr/bin/time %M (pipelines: the largest process of the pipeline).")
    p("")
    p("commands:")
    for name in runs:
        c = commands[name]
        shown = c["command"].removeprefix("exec ")
        suffix = os.path.splitext(corpora[c["corpus"]]["file"])[1]
        for placeholder, text in (("{sluice}", "sluice"), ("{url}", "URL"), ("{sha256}", "HEX"),
                                  ("{corpus}", "CORPUS" + suffix), ("{ref}/", ""), ("{sum}", "SUMFILE"),
                                  ("{out}", "/dev/null" if c["writes"] == "null" else "OUT")):
            shown = shown.replace(placeholder, text)
        p("  %-7s %s" % (name, shown))
    p("")

    stats = {}
    p("%-8s %-44s %9s %9s %9s %9s %9s" % ("command", "what", "median s", "min s", "max s", "MB/s", "RSS MiB"))
    p("-" * 103)
    for name, all_runs in runs.items():
        timed = [(s, r) for rnd, s, r in all_runs if rnd > 0]
        if not timed:
            continue
        secs, rss = [s for s, _ in timed], [r for _, r in timed]
        c = commands[name]
        corpus = corpora[c["corpus"]]
        nbytes = int(corpus["raw_bytes"] if c["output"] == "raw" else corpus["bytes"])
        med = statistics.median(secs)
        stats[name] = dict(median=med, rss_max=max(rss), sluice="{sluice}" in c["command"])
        p("%-8s %-44s %9.3f %9.3f %9.3f %9.1f %9.1f" % (
            name, c["what"], med, min(secs), max(secs), nbytes / med / 1e6, statistics.median(rss)))
    served = [n for n in stats if commands[n]["output"] == "served"]
    p("MB/s = 10^6 bytes of decompressed output per median second%s." % (
        " (%s: the served file's bytes)" % ", ".join(served) if served else ""))
    p("RSS = median over the repetitions of the peak resident set (sluice: its own process).")
    p("")

    p("%-52s %9s %10s  %s" % ("target", "value", "target", "result"))
    p("-" * 83)
    misses = skipped = 0
    for kind, check, named, op, target, meaning in load_targets(targets_path, commands):
        if check == "rss" or check.startswith("rss:"):
            # rss:CORPUS counts only the rows on that corpus (a decoder's window adds to its bound).
            corpus = check.partition(":")[2]
            peaks = [(s["rss_max"], n) for n, s in stats.items()
                     if s["sluice"] and (not corpus or commands[n]["corpus"] == corpus)]
            value, worst = max(peaks) if peaks else (None, "")
            label = "%s (max of all runs: %s)" % (meaning, worst) if peaks else meaning
            shown_target, shown_value = "%s %g" % (op, target), "%9.1f"
        else:
            num, den = named
            value = stats[num]["median"] / stats[den]["median"] if num in stats and den in stats else None
            ratio = "(%s)/(%s)" % (num, den)
            label = ("context: %-13s %s" if kind == "context" else "%-12s %s") % (ratio, meaning)
            shown_target, shown_value = "%s %.2f" % (op, target), "%9.2f"
        if value is None:
            skipped += 1
            p("%-52s %9s %10s  %s" % (label, "n/a", shown_target, "SKIPPED (rows not run)"))
            continue
        ok = value >= target if op == ">=" else value <= target
        misses += not ok
        p("%-52s %s %10s  %s" % (label, shown_value % value, shown_target, "PASS" if ok else "MISS"))
    p("")
    p("targets missed: %d%s" % (misses, ", not evaluated: %d" % skipped if skipped else ""))
    p("")
    p("raw wall seconds per repetition (round 0 = warm-up, not counted):")
    for name, all_runs in runs.items():
        p("  %-7s%s" % (name, "".join(" %d:%.3f" % (rnd, s) for rnd, s, _ in all_runs)))
    print("\n".join(out))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--check":   # before a run: the data files parse
        load_targets(sys.argv[3], load_commands(sys.argv[2]))
    elif len(sys.argv) == 5:
        main(*sys.argv[1:])
    else:
        sys.exit(__doc__)
