"""A tiny emulator of one warp running straight-line SASS (test helper, no GPU).

Enough of the instruction set for gemmlab's fragment_dump kernels as ptxas
emits them for sm_75 to sm_120: integer address arithmetic (IMAD, LEA, LOP3,
SHF, IADD3 with carries), constant-bank reads, 32/64-bit global loads and
stores, PRMT, HFMA2.MMA used as a move of constants, and MOVM.16.MT88 (an 8x8
transpose of 16-bit elements across the warp).  An unknown instruction raises
NotImplementedError, so a compiler that emits something new makes the test
fail loudly rather than pass.  This reads what the compiler generated; it is
not a measurement on a GPU.
"""

import re
import struct

M32 = 0xFFFFFFFF


def sections(text):
    parts = re.split(r"\.section\s+\.text\.([^,\s]+)", text)
    return {n: b for n, b in zip(parts[1::2], parts[2::2])}


INSTR = re.compile(r"/\*[0-9a-f]{4}\*/\s+(.*?)\s*;")


def instructions(body):
    out = []
    for ln in body.splitlines():
        m = INSTR.search(ln)
        if m:
            out.append(m.group(1))
    return out


def split_ops(s):
    ops, depth, cur = [], 0, ""
    for ch in s:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            ops.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        ops.append(cur.strip())
    return ops


def f2h(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


class Warp:
    def __init__(self, cbank, mem):
        self.R = [dict() for _ in range(32)]
        self.P = [dict() for _ in range(32)]
        self.c = cbank
        self.mem = mem

    def rd(self, lane, op):
        op = op.replace(".reuse", "")
        neg = inv = False
        if op.startswith("-"):
            neg, op = True, op[1:]
        if op.startswith("~"):
            inv, op = True, op[1:]
        if op in ("RZ", "URZ"):
            v = 0
        elif re.fullmatch(r"U?R\d+", op):
            v = self.R[lane][op]
        elif op.startswith("c[0x0]["):
            off = int(re.search(r"\]\[(0x[0-9a-f]+|\d+)\]", op).group(1), 0)
            v = self.c(off)
        elif re.fullmatch(r"-?(0x[0-9a-f]+|\d+)", op):
            v = int(op, 0) & M32
        else:
            raise ValueError(op)
        if inv:
            v = ~v & M32
        if neg:
            v = -v & M32
        return v

    def pr(self, lane, op):
        neg = op.startswith("!")
        op = op.lstrip("!")
        v = True if op in ("PT", "UPT") else self.P[lane].get(op, False)
        return (not v) if neg else v

    def wr(self, lane, reg, v):
        if reg not in ("RZ", "URZ"):
            self.R[lane][reg] = v & M32

    def reg_plus(self, reg, k):
        m = re.fullmatch(r"(U?R)(\d+)", reg.replace(".reuse", ""))
        return f"{m.group(1)}{int(m.group(2)) + k}"

    def addr(self, lane, op):
        # [R4.64+0x20]; sm_75 also adds a uniform register pair: [R6.64+UR4+0x20]
        m = re.search(r"\[(U?R\d+|RZ)(\.64)?(?:\+(UR\d+))?(?:\+(-?0x[0-9a-f]+))?\]$", op)
        reg, wide, ureg, imm = m.group(1), m.group(2), m.group(3), m.group(4)
        base = self.rd(lane, reg)
        if wide and reg != "RZ":
            base |= self.rd(lane, self.reg_plus(reg, 1)) << 32
        if ureg:
            base += self.rd(lane, ureg) | self.rd(lane, self.reg_plus(ureg, 1)) << 32
        return base + (int(imm, 0) if imm else 0)

    def run(self, instrs):
        for ins in instrs:
            pred = None
            m = re.match(r"@(!?U?P\w+)\s+(.*)", ins)
            if m:
                pred, ins = m.group(1), m.group(2)
            opc, _, rest = ins.partition(" ")
            ops = split_ops(rest)
            base = opc.split(".")[0]
            if base in ("EXIT",):
                return
            if base in ("NOP", "BRA"):
                continue
            if base == "MOVM":
                srcs = [self.rd(l, ops[1]) for l in range(32)]
                halves = [[0] * 8 for _ in range(8)]
                for l in range(32):
                    i, j = l // 4, 2 * (l % 4)
                    halves[i][j] = srcs[l] & 0xFFFF
                    halves[i][j + 1] = srcs[l] >> 16
                for l in range(32):
                    r, t = l // 4, 2 * (l % 4)
                    self.wr(l, ops[0], halves[t][r] | (halves[t + 1][r] << 16))
                continue
            for lane in range(32):
                if pred and not self.pr(lane, pred):
                    continue
                try:
                    self.exec1(lane, opc, base, ops)
                except Exception as e:
                    raise RuntimeError(f"{ins}: {type(e).__name__} {e}") from e

    def exec1(self, lane, opc, base, ops):
        rd = lambda o: self.rd(lane, o)
        if base == "S2R" or base == "S2UR":
            assert ops[1] in ("SR_LANEID", "SR_TID.X"), ops
            self.wr(lane, ops[0], lane)
        elif base in ("MOV", "UMOV"):
            self.wr(lane, ops[0], rd(ops[1]))
        elif base in ("LDC", "ULDC", "LDCU"):  # LDCU: sm_100/sm_120's ULDC
            v = rd(ops[1])
            self.wr(lane, ops[0], v)
            if ".64" in opc:
                off = int(re.search(r"\]\[(0x[0-9a-f]+)\]", ops[1]).group(1), 0)
                self.wr(lane, self.reg_plus(ops[0], 1), self.c(off + 4))
        elif base == "HFMA2":
            assert ops[1] == "-RZ" and ops[2] == "RZ", ops
            hi, lo = float(ops[3]), float(ops[4])
            self.wr(lane, ops[0], f2h(lo) | (f2h(hi) << 16))
        elif base in ("LOP3", "ULOP3"):
            a, b, c = rd(ops[1]), rd(ops[2]), rd(ops[3])
            lut = int(ops[4], 0)
            r = 0
            for bit in range(32):
                idx = (((a >> bit) & 1) << 2) | (((b >> bit) & 1) << 1) | ((c >> bit) & 1)
                r |= ((lut >> idx) & 1) << bit
            self.wr(lane, ops[0], r)
        elif base in ("SHF", "USHF"):
            lo, sh, hi = rd(ops[1]), rd(ops[2]) & 63, rd(ops[3])
            v = (hi << 32) | lo
            if ".R" in opc:
                v >>= sh
                self.wr(lane, ops[0], (v >> 32) if ".HI" in opc else v)
            else:
                v <<= sh
                self.wr(lane, ops[0], (v >> 32) if ".HI" in opc else v)
        elif base == "IMAD" or base == "UIMAD":
            if opc.endswith(".MOV.U32") or opc.endswith(".MOV"):
                self.wr(lane, ops[0], rd(ops[3]))
            elif ".SHL" in opc:
                self.wr(lane, ops[0], rd(ops[1]) * rd(ops[2]) + rd(ops[3]))
            elif ".WIDE" in opc:
                a, b = rd(ops[1]), rd(ops[2])
                c = rd(ops[3])
                if ops[3].startswith("c["):
                    off = int(re.search(r"\]\[(0x[0-9a-f]+)\]", ops[3]).group(1), 0)
                    c |= self.c(off + 4) << 32
                elif ops[3] not in ("RZ", "URZ"):
                    c |= rd(self.reg_plus(ops[3], 1)) << 32
                if ".U32" not in opc:
                    a = a - (1 << 32) if a >> 31 else a
                    b = b - (1 << 32) if b >> 31 else b
                v = (a * b + c) & ((1 << 64) - 1)
                self.wr(lane, ops[0], v)
                self.wr(lane, self.reg_plus(ops[0], 1), v >> 32)
            elif ".X" in opc:
                carry = 1 if (len(ops) > 4 and self.pr(lane, ops[4])) else 0
                self.wr(lane, ops[0], rd(ops[1]) * rd(ops[2]) + rd(ops[3]) + carry)
            else:
                self.wr(lane, ops[0], rd(ops[1]) * rd(ops[2]) + rd(ops[3]))
        elif base == "IADD" and ".64" in opc:  # sm_120: 64-bit add of register pairs
            a = rd(ops[1]) | rd(self.reg_plus(ops[1], 1)) << 32
            b = rd(ops[2]) | (rd(self.reg_plus(ops[2], 1)) << 32 if ops[2].startswith("R") and ops[2] != "RZ" else 0)
            v = (a + b) & ((1 << 64) - 1)
            self.wr(lane, ops[0], v)
            self.wr(lane, self.reg_plus(ops[0], 1), v >> 32)
        elif base == "IADD":  # sm_120: two-operand add
            self.wr(lane, ops[0], rd(ops[1]) + rd(ops[2]))
        elif base in ("IADD3", "UIADD3"):
            dst = ops[0]
            rest = ops[1:]
            pouts = []
            while rest and re.fullmatch(r"!?U?P(\d|T)", rest[0]):
                pouts.append(rest.pop(0))
            srcs = rest[:3]
            carry_in = 0
            if ".X" in opc:
                carry_in = sum(1 for p in rest[3:] if self.pr(lane, p))
            v = sum(rd(s) if not s.startswith("-") else (-self.rd(lane, s[1:])) for s in srcs) + carry_in
            self.wr(lane, dst, v)
            if pouts and pouts[0] not in ("PT", "!PT"):
                self.P[lane][pouts[0]] = (v >> 32) & 1 == 1 or v > M32
        elif base == "LEA":
            dst = ops[0]
            rest = ops[1:]
            pout = None
            if re.fullmatch(r"U?P\d", rest[0]):
                pout = rest.pop(0)
            if ".HI" in opc:
                # LEA.HI(.X) Rd, Ra, Rb, Rc, sh [, Pcarry]
                a, b, c, sh = rd(rest[0]), rd(rest[1]), rd(rest[2]), int(rest[3], 0)
                hi = ((((c << 32) | a) << sh) >> 32) & M32
                carry = 1 if (".X" in opc and len(rest) > 4 and self.pr(lane, rest[4])) else 0
                self.wr(lane, dst, hi + b + carry)
            else:
                a, b, sh = rd(rest[0]), rd(rest[1]), int(rest[2], 0)
                v = ((a << sh) & M32) + b
                self.wr(lane, dst, v)
                if pout:
                    self.P[lane][pout] = v > M32
        elif base == "PRMT":
            a, sel, b = rd(ops[1]), rd(ops[2]), rd(ops[3])
            bytes_ = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
            r = 0
            for i in range(4):
                s = (sel >> (4 * i)) & 0xF
                assert s < 8, hex(sel)
                r |= bytes_[s] << (8 * i)
            self.wr(lane, ops[0], r)
        elif base in ("LDG", "LD"):
            addr = self.addr(lane, ops[1])
            n = 2 if ".64" in opc else 4 if ".128" in opc else 1
            width = 2 if (".U16" in opc or ".S16" in opc) else 4
            for k in range(n):
                v = 0
                for bi in range(width):
                    v |= self.mem[addr + 4 * k + bi] << (8 * bi)
                self.wr(lane, self.reg_plus(ops[0], k) if k else ops[0], v)
        elif base in ("STG", "ST"):
            addr = self.addr(lane, ops[0])
            n = 2 if ".64" in opc else 4 if ".128" in opc else 1
            width = 2 if ".U16" in opc else 4
            for k in range(n):
                v = rd(self.reg_plus(ops[1], k) if k else ops[1])
                for bi in range(width):
                    self.mem[addr + 4 * k + bi] = (v >> (8 * bi)) & 0xFF
        else:
            raise NotImplementedError(opc + " " + ", ".join(ops))
