"""python -m cake_rmsnorm {bench,info}"""

import sys


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m cake_rmsnorm {bench,info} [options]\n"
              "  bench  time forward / backward / step against the peers (see bench --help)\n"
              "  info   version, built architectures, device")
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "bench":
        from .bench import main as bench_main
        return bench_main(rest)
    if cmd == "info":
        import torch

        import cake_rmsnorm as cr
        print(f"cake-rmsnorm {cr.__version__}, torch {torch.__version__}")
        print(f"library: {cr.get_library_path()}")
        print(f"CUDA archs built: {', '.join(f'sm_{a}a' for a in cr.built_archs()) or 'none (CPU-only build)'}")
        print(f"device: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device'}")
        return 0
    print(f"unknown command {cmd!r}; try bench or info", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
