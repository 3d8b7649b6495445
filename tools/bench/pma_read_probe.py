# How fast can an H200 read K and V in pma's layout ([rows, 4 heads, 128] bf16; 2.48 GB here, twice pma's)?
# Run on the device machine (PyTorch and Triton there): python3 tools/bench/pma_read_probe.py.
# Session 10 (tools/bench/NOTES.md) ran it as .deb/read_probe.py, whose prints said "GB/s" for what
# are TB/s (ms in the denominator); this copy prints TB/s.
# A: contiguous 1 KB rows (all heads per program); B: one head per program (256 B of each 1 KB row),
# heads of a segment on adjacent programs, as v9 reads. Both sum into a tiny output (read-bound).
import torch, triton, triton.language as tl
torch.manual_seed(0)
rows = 1_210_000  # twice pma's K/V rows (605,960: 1,152 sequences, ~526 keys each)
H, D = 4, 128
k = torch.randn(rows, H, D, device="cuda", dtype=torch.bfloat16)
v = torch.randn(rows, H, D, device="cuda", dtype=torch.bfloat16)
nbytes = 2 * k.numel() * 2
SEG = 512  # rows per program (a sequence's worth)

@triton.jit
def read_rows(k, v, out, rows, SEG: tl.constexpr, BR: tl.constexpr, W: tl.constexpr):
    pid = tl.program_id(0)
    r0 = pid * SEG
    acc = tl.zeros([BR, W], dtype=tl.float32)
    for j in range(0, SEG, BR):
        r = r0 + j + tl.arange(0, BR)
        m = r[:, None] < rows
        off = r[:, None] * W + tl.arange(0, W)[None, :]
        acc += tl.load(k + off, mask=m, other=0.).to(tl.float32) + tl.load(v + off, mask=m, other=0.).to(tl.float32)
    tl.store(out + pid, tl.sum(acc))

@triton.jit
def read_head(k, v, out, rows, SEG: tl.constexpr, BR: tl.constexpr, H: tl.constexpr, D: tl.constexpr):
    pid = tl.program_id(0)
    seg = pid // H
    h = pid % H
    r0 = seg * SEG
    acc = tl.zeros([BR, D], dtype=tl.float32)
    for j in range(0, SEG, BR):
        r = r0 + j + tl.arange(0, BR)
        m = r[:, None] < rows
        off = r[:, None] * (H * D) + h * D + tl.arange(0, D)[None, :]
        acc += tl.load(k + off, mask=m, other=0.).to(tl.float32) + tl.load(v + off, mask=m, other=0.).to(tl.float32)
    tl.store(out + pid, tl.sum(acc))

nseg = triton.cdiv(rows, SEG)
out = torch.empty(nseg * H, device="cuda", dtype=torch.float32)
def time(fn, n=50):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort(); return ts[len(ts) // 2]
for BR in (16, 32, 64):
    for nw in (4, 8):
        t = time(lambda: read_rows[(nseg,)](k, v, out, rows, SEG=SEG, BR=BR, W=H * D, num_warps=nw))
        print(f"A rows  BR={BR:3d} warps={nw}: {t:.4f} ms {nbytes / t / 1e9:.2f} TB/s", flush=True)
        t = time(lambda: read_head[(nseg * H,)](k, v, out, rows, SEG=SEG, BR=BR, H=H, D=D, num_warps=nw))
        print(f"B heads BR={BR:3d} warps={nw}: {t:.4f} ms {nbytes / t / 1e9:.2f} TB/s", flush=True)
t = time(lambda: torch.add(k, v, out=None))
print(f"torch k+v (read 2, write 1): {t:.4f} ms {1.5 * nbytes / t / 1e9:.2f} TB/s")
kv = torch.cat([k, v])
t = time(lambda: kv.sum(dtype=torch.float32))
print(f"torch sum over k,v: {t:.4f} ms {nbytes / t / 1e9:.2f} TB/s")
t = time(lambda: k.copy_(v))
print(f"copy v->k: {t:.4f} ms {nbytes / t / 1e9:.2f} TB/s (read+write)")
