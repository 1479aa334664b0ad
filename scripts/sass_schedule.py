"""Registers, spills, CTAs an SM and the load order of each kernel of a generated unit, from
its SASS, without a GPU: the unit's PTX is compiled once, then each kernel alone through ptxas
(a fraction of a second a kernel, where the whole unit takes minutes).

    python scripts/sass_schedule.py fwd_bf16_v4 --match 'stream.*float' [--arch 90a] [--src DIR]

For each kernel: registers and spilled bytes (ptxas -v), the 128/256/512-thread CTAs an SM its
registers allow (a ring's shared memory may allow fewer), and "loads first": of the global
loads (LDG; the ring's cp.async is not counted) issued before the row's first shuffle or
barrier, how many come before the first floating-point arithmetic (a row whose loads trail its
arithmetic waits on memory twice; docs/perf/runs/h200-pairs-ab4.md), and "in flight": how many
of those loads are issued before the first instruction that waits on a scoreboard one of them
set (the control bits of each instruction's encoding). A wait there stalls the rest of the
row's loads behind the first ones' memory latency, whatever the source order (ptxas shares its
six scoreboards: a constant load's wait then waits for x too; docs/perf/runs/h200-pairs-ab5.md).
--src reads another
tree (a `git archive` of an older commit) to compare. Needs nvcc, ptxas, and cuobjdump and
nvdisasm on PATH (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

# The numerics flags of setup.py's nvcc line (the schedule depends on them).
NVCC_FLAGS = ["-O3", "-DCAKE_WITH_CUDA=1", "--prec-div=true", "--prec-sqrt=true", "--ftz=false"]
REGS_PER_SM, REG_UNIT, MAX_THREADS_PER_SM = 65536, 8, 2048  # sm_90/100: a thread's registers in 8s
FP_OPS = ("FMUL", "FFMA", "FADD", "FMUL2", "FFMA2", "FADD2")  # sm_100 adds the paired forms
OPS = re.compile(r"\b(LDG|SHFL|BAR|%s)\b" % "|".join(FP_OPS))


def ctas_per_sm(regs, threads):
    per_thread = -(-regs // REG_UNIT) * REG_UNIT
    return min(REGS_PER_SM // (per_thread * threads), MAX_THREADS_PER_SM // threads)


def entries(ptx):
    """(name, the module with every other kernel removed: its functions and declarations kept)."""
    blocks = list(re.finditer(r"^\.visible \.entry (\w+)\(.*?^}\n?", ptx, re.S | re.M))
    for b in blocks:
        text, end = "", 0
        for other in blocks:
            text += ptx[end:other.start()] + (other.group(0) if other is b else "")
            end = other.end()
        yield b.group(1), text + ptx[end:]


# cuobjdump -sass: an instruction's line, then its encoding's high 64 bits on the next line.
INSN = re.compile(r"/\*[0-9a-f]{4}\*/\s+(.*?);\s*/\* 0x[0-9a-f]{16} \*/\s*\n\s*/\* 0x([0-9a-f]{16}) \*/")


def instructions(sass):
    """(text, scoreboard written or None, scoreboards waited on as a mask) of each instruction:
    the control bits 105..125 of sm_70+ encodings (stall 4, yield 1, write 3, read 3, wait 6)."""
    for m in INSN.finditer(sass):
        ctl = int(m.group(2), 16) >> 41
        wr = (ctl >> 5) & 7
        yield m.group(1), (None if wr == 7 else wr), (ctl >> 11) & 0x3F


def schedule(sass):
    """Loads before the first FP op, loads before the first wait on a load's scoreboard, and
    loads before the first shuffle or barrier."""
    first, in_flight, before_sync, seen_fp, waited = 0, 0, 0, False, False
    loading = set()  # scoreboards an issued load will release
    for text, wr, wait in instructions(sass):
        op = OPS.search(text)
        if op and op.group(1) in ("SHFL", "BAR"):
            break
        waited = waited or any(wait >> sb & 1 for sb in loading)
        if op and op.group(1) in FP_OPS:
            seen_fp = True
        elif op:
            before_sync += 1
            first += not seen_fp
            in_flight += not waited
            loading.add(wr)
    return first, in_flight, before_sync


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("unit", help="a unit of csrc/api/gen, e.g. fwd_bf16_v4")
    p.add_argument("--match", default="", help="regex on the demangled kernel name")
    p.add_argument("--arch", default="90a")
    p.add_argument("--src", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ptx_path = os.path.join(tmp, "unit.ptx")
        subprocess.run(["nvcc", *NVCC_FLAGS, "-gencode", f"arch=compute_{a.arch},code=sm_{a.arch}",
                        "-I", os.path.join(a.src, "csrc", "include"), "-ptx",
                        os.path.join(a.src, "csrc", "api", "gen", a.unit + ".cu"), "-o", ptx_path], check=True)
        ptx = open(ptx_path).read()
        print("| kernel | registers | spilled B | CTAs of 128 / 256 / 512 | loads first | in flight |")
        print("|---|---|---|---|---|---|")
        shown = 0
        for name, text in entries(ptx):
            demangled = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
            if not re.search(a.match, demangled):
                continue
            one, cubin = os.path.join(tmp, "one.ptx"), os.path.join(tmp, "one.cubin")
            open(one, "w").write(text)
            log = subprocess.run(["ptxas", f"-arch=sm_{a.arch}", "-v", one, "-o", cubin],
                                 capture_output=True, text=True, check=True).stderr
            # This kernel's lines, not those of a function it calls (printed in either order).
            entry = log[log.index(f"Compiling entry function '{name}'"):]
            regs = int(re.search(r"Used (\d+) registers", entry).group(1))
            spill = int(re.search(rf"Function properties for {name}\n.*?(\d+) bytes spill stores", log).group(1))
            sass = subprocess.run(["cuobjdump", "-sass", cubin], capture_output=True, text=True, check=True).stdout
            first, in_flight, total = schedule(sass)
            short = re.sub(r"cake::|\(cake::FwdParams\)|\(cake::BwdParams\)|void ", "", demangled)
            ctas = " / ".join(str(ctas_per_sm(regs, t)) for t in (128, 256, 512))
            print(f"| {short} | {regs} | {spill} | {ctas} | {first} of {total} | {in_flight} of {total} |")
            shown += 1
        if not shown:
            print(f"no kernel of {a.unit} matches {a.match!r}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
