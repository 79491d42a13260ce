"""Where a prefill's model time goes, kernel by kernel, from Nsight Compute's durations
(bench/kernel_lease.sh's ncu-times step: `ncu --metrics gpu__time_duration.sum --csv --page
raw` over forward_bench's warm-up prefill and one timed one). Takes the second prefill (the
longest run of kernel names repeated at the end), sums the durations per kernel, and splits
the attention launches by grid (one grid per chunk size).

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
second=data[n-size:]
num=lambda x: float(x.replace(',',''))
tot=collections.Counter(); cnt=collections.Counter()
for r in second:
    k=re.sub(r'\(.*','',r[ki])[:80]
    tot[k]+=num(r[ti]); cnt[k]+=1
s=sum(tot.values())
print(f"one prefill: {size} kernels")
for k,v in tot.most_common():
    print(f"{v*1e-6:8.2f} ms  {cnt[k]:4d}  {k}")
print(f"total {s*1e-6:.2f} ms")
# per-chunk attention
att=[(r[gi], num(r[ti])) for r in second if 'wgmma_ws' in r[ki]]
by=collections.defaultdict(list)
for g,t in att: by[g].append(t)
for g,v in by.items(): print('attention grid',g,len(v),f"{sum(v)*1e-6:.2f} ms, mean {sum(v)/len(v)*1e-3:.1f} us")
