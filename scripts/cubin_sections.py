"""Compares the kernels of two builds' object files, section by section: each kernel's .text,
.nv.constant0, .nv.shared and .nv.info (symbol indices replaced by the symbols' names) in every
object's cubins. For a refactor that claims the same machine code.

    python scripts/cubin_sections.py BEFORE_DIR AFTER_DIR   # directories of nvcc -c objects

Needs cuobjdump on PATH (pip install nvidia-cuda-cuobjdump) and pyelftools. Prints the kernel
counts, the kernels only one side has and those whose sections differ; exits 1 on a difference
in a kernel both have.
"""

import glob
import hashlib
import os
import struct
import subprocess
import sys
import tempfile

from elftools.elf.elffile import ELFFile

SECTIONS = (".text.", ".nv.info.", ".nv.constant0.", ".nv.shared.")
# .nv.info attributes whose payload starts with a symbol index: PARAM_CBANK, FRAME_SIZE,
# MIN_STACK_SIZE, MAX_STACK_SIZE, REGCOUNT.
SYMBOL_ATTRS = {0x0A, 0x11, 0x12, 0x23, 0x2F}


def info_without_indices(data, name_of):
    out, o = b"", 0
    while o < len(data):
        fmt, attr = data[o], data[o + 1]
        if fmt == 4:  # EIFMT_SVAL: u16 size, then the payload
            size = struct.unpack_from("<H", data, o + 2)[0]
            payload = data[o + 4:o + 4 + size]
            if attr in SYMBOL_ATTRS and size >= 4:
                payload = name_of(struct.unpack_from("<I", payload)[0]).encode() + payload[4:]
            out += bytes([fmt, attr]) + payload
            o += 4 + size
        elif fmt == 3:  # EIFMT_HVAL: a u16 value
            out += data[o:o + 4]
            o += 4
        else:
            out += data[o:o + 2]
            o += 2
    return out


def kernels(objdir):
    """{kernel: {section: sha1}} over every object's cubins, and the count of kernel copies."""
    found, copies = {}, 0
    for obj in sorted(glob.glob(os.path.join(objdir, "*.o"))):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run(["cuobjdump", "-xelf", "all", os.path.abspath(obj)], cwd=d, check=True,
                           capture_output=True)
            for cubin in sorted(glob.glob(os.path.join(d, "*.cubin"))):
                with open(cubin, "rb") as f:
                    elf = ELFFile(f)
                    syms = list(elf.get_section_by_name(".symtab").iter_symbols())

                    def name_of(i):
                        if i >= len(syms):
                            return f"#{i}"
                        s = syms[i]
                        shndx = s["st_shndx"]
                        return s.name or "section:" + (elf.get_section(shndx).name if isinstance(shndx, int) else str(shndx))

                    for sec in elf.iter_sections():
                        pre = next((p for p in SECTIONS if sec.name.startswith(p)), None)
                        if pre is None or sec.name.endswith("reserved.0"):
                            continue
                        data = sec.data() if sec["sh_type"] != "SHT_NOBITS" else str(sec["sh_size"]).encode()
                        if pre == ".nv.info.":
                            data = info_without_indices(data, name_of)
                        copies += pre == ".text."
                        found.setdefault(sec.name[len(pre):], {}).setdefault(pre, set()).add(hashlib.sha1(data).hexdigest())
    return found, copies


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    (a, ca), (b, cb) = kernels(argv[0]), kernels(argv[1])
    print(f"kernels: {len(a)} before, {len(b)} after; copies: {ca} before, {cb} after")
    for name in sorted(set(a) - set(b)):
        print("only before:", name)
    for name in sorted(set(b) - set(a)):
        print("only after:", name)
    differ = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    for name in differ:
        print("differs:", name, [p for p in SECTIONS if a[name].get(p) != b[name].get(p)])
    print(f"{len(differ)} of {len(set(a) & set(b))} kernels both have differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
