"""python -m cake_rmsnorm {bench,info,windows}"""

import argparse
import sys


# The SM count of each shipped architecture's reference device (H200; B200, GB300, R200), for the
# windows command without a device.
REFERENCE_SMS = {90: 132, 100: 148, 103: 152, 107: 212}


def windows_text(hidden, sm, routes=None, sms=None):
    """The dispatch windows of each width and route as text, ` | ` between them. A row's outputs
    are bitwise the same on both sides of every edge: windows that share a row group run one
    order, and the plain forward's wider small-T group sums in its ring group's order
    (docs/programs.md, "One order a width")."""
    import cake_rmsnorm as cr
    lines = []
    for h in hidden:
        table = cr.program_windows(hidden=h, sm=sm, sms=sms)
        for route in routes or cr.ROUTES:
            parts = []
            wins = table[route]
            for i, (above, at_most, name) in enumerate(wins):
                parts.append(f"({above}, inf) {name}" if at_most is None else f"({above}, {at_most}] {name}")
                if i + 1 < len(wins):
                    parts.append("|")
            lines.append(f"sm_{sm}a{f' ({sms} SMs)' if sms else ''} {route} H={h}: " + " ".join(parts))
    return "\n".join(lines)


def _launch_text(launch):
    """A Launch in a line: the instance's family and template arguments, grid x block, smem."""
    i = launch["instance"]
    args = [f"v{i['vectors']}", f"{i['w']} w"] + [k for k in ("residual", "warp_sync", "pair") if i[k]]
    args += [f"tpr {i['tpr']}"] if i["tpr"] else []
    args += [f"{i['rows']} rows"] if i["rows"] > 1 else []
    text = f"{i['family']}[{', '.join(args)}] {launch['grid']} x {launch['block']}, smem {launch['smem_bytes']}"
    if "finalize" in launch:
        text += f"; finalize {launch['finalize']['grid']} x {launch['finalize']['block']}"
    return text


def plans_text(hidden, tokens, sm, sms, routes=None, weight_fp32=False, dtype="bf16"):
    """What each call runs (cake_rmsnorm.launch_plan), one line per width, route and T."""
    import cake_rmsnorm as cr
    import torch
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    wd = torch.float32 if weight_fp32 else None
    lines = []
    for h in hidden:
        for route in routes or cr.ROUTES:
            for t in tokens:
                plan = cr.launch_plan(route, h, t, dtype=dt, weight_dtype=wd, sm=sm, sms=sms)
                rest = ", ".join(f"{k} {v}" for k, v in plan.items() if k not in ("program", "group", "launch"))
                lines.append(f"sm_{sm}a {route} H={h} T={t}: {plan['program']} ({rest}) -> {_launch_text(plan['launch'])}")
    return "\n".join(lines)


def _windows_main(argv):
    import cake_rmsnorm as cr
    p = argparse.ArgumentParser(prog="python -m cake_rmsnorm windows", description=windows_text.__doc__)
    p.add_argument("--hidden", required=True, type=lambda s: [int(v) for v in s.split(",")],
                   help="widths, comma-separated (multiples of 8)")
    p.add_argument("--sm", type=int, default=None,
                   help=f"one of {', '.join(map(str, cr.SHIPPED_ARCHS))} (default: the current CUDA device's; "
                        "without one, every shipped architecture)")
    p.add_argument("--route", choices=cr.ROUTES, action="append", help="one route (repeatable); all by default")
    p.add_argument("--plan", default=None, type=lambda s: [int(v) for v in s.split(",")], metavar="T,T,...",
                   help="also print what a call of each of these token counts runs (launch_plan)")
    p.add_argument("--sms", type=int, default=None,
                   help="the SM count (default: the current device's; without one, the reference device's: "
                        + ", ".join(f"sm_{k}a {v}" for k, v in REFERENCE_SMS.items()) + ")")
    p.add_argument("--fp32-weight", action="store_true", help="--plan: an FP32 weight (default: the activations')")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"], help="--plan: the activations' dtype")
    a = p.parse_args(argv)
    import torch
    if a.sm is not None and a.sm not in cr.SHIPPED_ARCHS:
        p.error(f"--sm {a.sm}: one of {', '.join(map(str, cr.SHIPPED_ARCHS))}")
    if a.sms is not None and not 1 <= a.sms <= 1 << 20:
        p.error(f"--sms {a.sms}: a positive SM count")
    if a.sm is None and torch.cuda.is_available():  # the current device, its own SM count
        major, minor = torch.cuda.get_device_capability()
        archs = [10 * major + minor]
        sms_of = {archs[0]: a.sms or torch.cuda.get_device_properties(0).multi_processor_count}
    else:  # --sm, or no device: every shipped architecture (or --sm) on its reference device
        archs = [a.sm] if a.sm is not None else list(cr.SHIPPED_ARCHS)
        here = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else None
        sms_of = {sm: a.sms or here or REFERENCE_SMS[sm] for sm in archs}
        if a.sm is None:
            print("no CUDA device: every shipped architecture at its reference device's SM count "
                  + ", ".join(f"sm_{sm}a {n}" for sm, n in sms_of.items()), file=sys.stderr)
    built = cr.built_archs()
    try:
        for sm in archs:
            if sm not in built:  # the tables are the library's either way; the kernels are not here
                print(f"sm_{sm}a: not in this build (built: {', '.join(f'sm_{b}a' for b in built) or 'none, CPU-only'}); "
                      "its tables are shown, but this library cannot run them", file=sys.stderr)
            print(windows_text(a.hidden, sm, a.route, sms_of[sm]))
            if a.plan:
                print(plans_text(a.hidden, a.plan, sm, sms_of[sm], a.route, a.fp32_weight, a.dtype))
    except ValueError as e:
        p.error(str(e))
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m cake_rmsnorm {bench,info,windows} [options]\n"
              "  bench    time forward / backward / step against the peers (see bench --help)\n"
              "  info     version, built architectures, device\n"
              "  windows  the dispatch windows of some widths (see windows --help)")
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
        print(f"build: {cr.build_info()}")
        print(f"CUDA archs built: {', '.join(f'sm_{a}a' for a in cr.built_archs()) or 'none (CPU-only build)'}")
        print(f"device: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device'}")
        return 0
    if cmd == "windows":
        return _windows_main(rest)
    print(f"unknown command {cmd!r}; try bench, info or windows", file=sys.stderr)
    return 2


def _main_piped():
    """main(), quiet when the reader of stdout goes away (`windows ... | head`)."""
    try:
        return main()
    except BrokenPipeError:
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0


if __name__ == "__main__":
    sys.exit(_main_piped())
