# A group's scales and biases for the panel kernels' generators (gen_panel.py, gen_amx.py), in the format the
# panels hold them (panel.go's panels.sform: float32, half or bfloat16; biases stored, or each its scale times
# a.bmul): Z24 gets the 16 scales from R9, Z27 the 16 biases from R8, both as float32 and exactly the values
# panelRunGo reads. R14 is clobbered.

# panelArgs field offsets (panel.go) of the format, the bias multiplier and the bytes of one group's values.
SFORM, BMUL, SSTEP = 112, 120, 128


def scales_biases(e, lbl):
    e(f"\tMOVQ {SFORM}(AX), R14")
    e("\tCMPQ R14, $1")  # scaleF16
    e(f"\tJEQ {lbl}_h")
    e("\tCMPQ R14, $2")  # scaleBF16
    e(f"\tJEQ {lbl}_b")
    for form in ("f", "h", "b"):
        if form != "f":
            e(f"{lbl}_{form}:")
        for src, dst in (("R9", "Z24"), ("R8", "Z27")):
            if dst == "Z27":
                e(f"\tCMPQ {BMUL}(AX), $0")
                e(f"\tJNE {lbl}_d")
            if form == "f":
                e(f"\tVMOVUPS ({src}), {dst}")
            elif form == "h":
                e(f"\tVCVTPH2PS ({src}), {dst}")
            else:
                e(f"\tVPMOVZXWD ({src}), {dst}")
                e(f"\tVPSLLD $16, {dst}, {dst}")
        e(f"\tJMP {lbl}_s")
    e(f"{lbl}_d:")
    e(f"\tVBROADCASTSS {BMUL}(AX), Z27")
    e("\tVMULPS Z24, Z27, Z27")
    e(f"{lbl}_s:")


def next_group(e):
    # R8 and R9 to the next group's biases and scales.
    e(f"\tADDQ {SSTEP}(AX), R8")
    e(f"\tADDQ {SSTEP}(AX), R9")
