"""Where a read's model time goes, kernel by kernel, from Nsight Compute's durations
(bench/kernel_lease.sh's ncu-times step: `ncu --metrics gpu__time_duration.sum --csv --page
raw` over forward_bench's warm-up prefill and one timed one; its ncu-short step over the
short read's iterations). Takes the longest run of kernel names repeated at the end (the
second prefill), and when that run is itself several identical reads (the short read's
graph replays), one of them; sums the durations per kernel, and splits the attention
launches by grid (one grid per chunk size).

    python3 bench/ncu_times.py ncu-times.csv
"""
import csv, collections, re, sys
lines=open(sys.argv[1]).read().splitlines()
start=[i for i,l in enumerate(lines) if l.startswith('"ID"')][0]
rows=list(csv.reader(lines[start:]))
hdr=rows[0]; units=rows[1]; data=rows[2:]
ki=hdr.index("Kernel Name"); ti=hdr.index("gpu__time_duration.sum"); gi=hdr.index("Grid Size")
names=[r[ki] for r in data]; n=len(data)
for size in range(n//2, 0, -1):
    if names[n-size:]==names[n-2*size:n-size]:
        break
# The smallest period of that run: a run of identical reads counts as one of them.
period=next(p for p in range(1, size+1) if size%p==0 and names[n-size:n-p]==names[n-size+p:])
reads=size//period
second=data[n-period:]
num=lambda x: float(x.replace(',',''))
tot=collections.Counter(); cnt=collections.Counter()
for r in second:
    k=re.sub(r'\(.*','',r[ki])[:80]
    tot[k]+=num(r[ti]); cnt[k]+=1
s=sum(tot.values())
print(f"one read: {period} kernels" + (f" (the last {reads} reads alike; the last one)" if reads>1 else ""))
for k,v in tot.most_common():
    print(f"{v*1e-6:8.2f} ms  {cnt[k]:4d}  {k}")
print(f"total {s*1e-6:.2f} ms")
# per-chunk attention
att=[(r[gi], num(r[ti])) for r in second if 'wgmma_ws' in r[ki]]
by=collections.defaultdict(list)
for g,t in att: by[g].append(t)
for g,v in by.items(): print('attention grid',g,len(v),f"{sum(v)*1e-6:.2f} ms, mean {sum(v)/len(v)*1e-3:.1f} us")
