#!/usr/bin/env python3
"""Page cache hit ratios under YCSB's scrambled zipfian (constant 0.99): CLOCK as woods' cache
runs it (a page enters referenced), CLOCK with pages entering unreferenced, and S3-FIFO (a small
probationary FIFO, a main CLOCK-like FIFO and a ghost list). Keys sit PER to a page in key order;
YCSB scrambles each zipfian rank with FNV-1a, so hot keys are scattered one per page.

    scripts/cache-sim.py [KEYS [CACHE_PAGES [REQUESTS]]]   (default 5000000 24000 1000000)

docs/results/stbe.md quotes its figures (a few minutes of Python at the defaults)."""
import random, math, sys
from collections import OrderedDict, deque
N=int(sys.argv[1]) if len(sys.argv)>1 else 5_000_000
PER=30
PAGES=N//PER
CAP=int(sys.argv[2]) if len(sys.argv)>2 else 24000
REQ=int(sys.argv[3]) if len(sys.argv)>3 else 1_000_000
theta=0.99
zetan=0.0
for i in range(1,N+1): zetan+=1.0/i**theta
zeta2=1+0.5**theta
alpha=1/(1-theta); eta=(1-(2/N)**(1-theta))/(1-zeta2/zetan)
rnd=random.Random(1)
def zipf():
    u=rnd.random(); uz=u*zetan
    if uz<1: return 0
    if uz<1+0.5**theta: return 1
    return int(N*(eta*u-eta+1)**alpha)
def fnv(x):
    h=0xCBF29CE484222325
    for _ in range(8):
        h^=x&0xff; x>>=8; h=(h*0x100000001B3)&0xFFFFFFFFFFFFFFFF
    return h
reqs=[fnv(zipf())%N for _ in range(REQ)]
# key -> page: keys sorted, page = key // PER (key ids are the scrambled positions)
pages=[k//PER for k in reqs]
def clock(pages, cap, ref_on_insert=True):
    slots=[]; idx={}; ref=[]; hand=0; hits=0
    for p in pages:
        i=idx.get(p)
        if i is not None: ref[i]=True; hits+=1; continue
        if len(slots)<cap:
            idx[p]=len(slots); slots.append(p); ref.append(ref_on_insert); continue
        while ref[hand]: ref[hand]=False; hand=(hand+1)%cap
        del idx[slots[hand]]; slots[hand]=p; idx[p]=hand; ref[hand]=ref_on_insert; hand=(hand+1)%cap
    return hits/len(pages)
def s3fifo(pages, cap, small_frac=0.1):
    scap=max(1,int(cap*small_frac)); mcap=cap-scap
    S=deque(); M=deque(); freq={}; inS=set(); inM=set(); ghost=OrderedDict(); hits=0
    def evictM():
        while True:
            p=M.popleft()
            if freq[p]>0: freq[p]-=1; M.append(p)
            else: inM.discard(p); del freq[p]; return
    def insertM(p):
        if len(M)>=mcap: evictM()
        M.append(p); inM.add(p)
    def evictS():
        while S:
            p=S.popleft(); inS.discard(p)
            if freq[p]>0:
                freq[p]=0; insertM(p); return
            else:
                del freq[p]; ghost[p]=None
                if len(ghost)>mcap: ghost.popitem(last=False)
                return
    for p in pages:
        if p in inS or p in inM:
            freq[p]=min(freq[p]+1,3); hits+=1; continue
        if p in ghost:
            del ghost[p]; freq[p]=0; insertM(p); continue
        if len(S)>=scap: evictS()
        S.append(p); inS.add(p); freq[p]=0
    return hits/len(pages)
half=len(pages)//2
for name,f in [('clock',lambda ps: clock(ps,CAP)),('clock-noref',lambda ps: clock(ps,CAP,False)),('s3fifo',lambda ps: s3fifo(ps,CAP))]:
    print(name, round(f(pages),3), flush=True)
