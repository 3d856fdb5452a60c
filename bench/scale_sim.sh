#!/usr/bin/env bash
# sf-testbed sim at 10^4, 10^5 and 10^6 ranks x 100 steps: wall time, CPU time and peak RSS
# (GNU time -v) of the streamed path (default) and, where it fits in memory, the whole-matrix
# path (--whole-matrix), REPS runs each (medians reported, every run kept). Writes
# results/scale/scale.{json,md} and scale.png.
#
#   bash bench/scale_sim.sh                 # BUILD=build  RANKS="10000 100000 1000000"  REPS=3
#   WHOLE_MAX=100000                        # largest R also run with --whole-matrix
#
# Wall time on a shared machine is load-bound: the load average before each run, the hypervisor
# steal over it and the user+sys CPU seconds are recorded beside it. The yardstick measured in
# the same run is a single-core memcpy of one 10^6-rank step's matrix (48 MB) -- the least any
# step of the model could cost -- from frontier_bench (BM_memcpy at 16384 x 600 x 6 bytes' rate).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RANKS=${RANKS:-"10000 100000 1000000"}
WHOLE_MAX=${WHOLE_MAX:-100000}
STEPS=${STEPS:-100}
REPS=${REPS:-3}
OUT=${OUT:-results/scale}
SF=$BUILD/sf-testbed
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
steal_ticks() { awk '/^cpu / {print $9}' /proc/stat; }
total_ticks() { awk '/^cpu / {s=0; for(i=2;i<=NF;i++) s+=$i; print s}' /proc/stat; }
memcpy_gbs=null
if [[ -x $BUILD/bench/frontier_bench ]]; then
  memcpy_gbs=$("$BUILD/bench/frontier_bench" --benchmark_filter='BM_memcpy/R:16384/N:600' --benchmark_repetitions=5 \
      --benchmark_report_aggregates_only=true --benchmark_format=json 2>/dev/null |
    /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print([b for b in d['benchmarks'] if b.get('aggregate_name')=='median'][0]['bytes_per_second']/1e9)")
  echo "scale_sim: memcpy yardstick ${memcpy_gbs} GB/s" >&2
fi
rows=()
for R in $RANKS; do
  for path in streamed whole; do
    extra=""
    if [[ $path == whole ]]; then
      ((R <= WHOLE_MAX)) || continue
      extra="--whole-matrix"
    fi
    cmd="$SF sim --ranks $R --steps $STEPS --seed 1 --json $extra"
    for rep in $(seq 1 "$REPS"); do
      load=$(cut -d' ' -f1 /proc/loadavg)
      s0=$(steal_ticks); t0=$(total_ticks)
      /usr/bin/time -v $cmd > "$TMP/out.json" 2> "$TMP/time.txt"
      s1=$(steal_ticks); t1=$(total_ticks)
      steal=$(printf "%.4f" "$(echo "scale=4; ($s1 - $s0) / ($t1 - $t0 + 1)" | bc)")
      wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$TMP/time.txt")
      user=$(awk -F': ' '/User time/ {print $2}' "$TMP/time.txt")
      sys=$(awk -F': ' '/System time/ {print $2}' "$TMP/time.txt")
      rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$TMP/time.txt")
      makespan=$(/usr/bin/python3 -c "import json,sys; print(json.load(open('$TMP/out.json'))['evidence']['exposed_makespan_s'])")
      labels=$(/usr/bin/python3 -c "import json,sys; print(','.join(json.load(open('$TMP/out.json'))['evidence']['labels']))")
      echo "scale_sim: R=$R $path run $rep wall ${wall}s cpu $(echo "$user + $sys" | bc)s rss ${rss}KB (load $load, steal $steal)" >&2
      rows+=("{\"ranks\":$R,\"steps\":$STEPS,\"path\":\"$path\",\"rep\":$rep,\"wall_s\":$wall,\"user_s\":$user,\"sys_s\":$sys,\"max_rss_kb\":$rss,\"load_before\":$load,\"steal\":$steal,\"exposed_makespan_s\":$makespan,\"labels\":\"$labels\",\"command\":\"$cmd\"}")
    done
  done
done
printf '%s\n' "${rows[@]}" > "$TMP/rows.jsonl"
/usr/bin/python3 - "$TMP/rows.jsonl" "$OUT" "$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!results' || echo -dirty)" "$memcpy_gbs" <<'PY'
import json, sys, os, platform, datetime, statistics
runs = [json.loads(l) for l in open(sys.argv[1])]
out, commit = sys.argv[2], sys.argv[3]
memcpy_gbs = None if sys.argv[4] == "null" else float(sys.argv[4])
rows = []
for key in dict.fromkeys((r["ranks"], r["path"]) for r in runs):
    rs = [r for r in runs if (r["ranks"], r["path"]) == key]
    med = lambda f: statistics.median(f(r) for r in rs)
    row = {"ranks": key[0], "path": key[1], "steps": rs[0]["steps"], "runs": len(rs),
           "wall_s": med(lambda r: r["wall_s"]), "wall_min_s": min(r["wall_s"] for r in rs), "wall_max_s": max(r["wall_s"] for r in rs),
           "cpu_s": med(lambda r: r["user_s"] + r["sys_s"]), "max_rss_mb": max(r["max_rss_kb"] for r in rs) / 1024,
           "load_before": med(lambda r: r["load_before"]), "steal": med(lambda r: r["steal"]),
           "exposed_makespan_s": rs[0]["exposed_makespan_s"], "labels": rs[0]["labels"], "command": rs[0]["command"],
           "same_answer_every_run": len({r["exposed_makespan_s"] for r in rs}) == 1}
    # Yardstick: one single-core memcpy of every step's matrix (ranks x 6 stages x 8 bytes).
    if memcpy_gbs:
        row["memcpy_all_steps_s"] = row["ranks"] * 6 * 8 * row["steps"] / (memcpy_gbs * 1e9)
        row["wall_over_memcpy"] = row["wall_s"] / row["memcpy_all_steps_s"]
    rows.append(row)
meta = {"schema": "sf.scale/2", "commit": commit, "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": platform.node(), "cpus": os.cpu_count(), "command": "bash bench/scale_sim.sh", "memcpy_gb_per_s": memcpy_gbs,
        "rows": rows, "runs": runs}
json.dump(meta, open(os.path.join(out, "scale.json"), "w"), indent=2)
lines = [f"# sim at scale: ranks x {rows[0]['steps']} steps, streamed vs whole matrix", "",
         f"commit {commit}, {meta['date']}, host {meta['host']} ({meta['cpus']} cpus); command `bash bench/scale_sim.sh`; "
         f"median of {rows[0]['runs']} runs each (min-max beside); yardstick: single-core memcpy at "
         f"{memcpy_gbs:.1f} GB/s in the same run" if memcpy_gbs else "", "",
         "| ranks | path | wall s (min-max) | CPU s (user+sys) | peak RSS MB | load before | steal | wall / memcpy of every step | exposed makespan s | labels |",
         "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
for r in rows:
    lines.append(f"| {r['ranks']} | {r['path']} | {r['wall_s']:.2f} ({r['wall_min_s']:.2f}-{r['wall_max_s']:.2f}) | {r['cpu_s']:.2f} | "
                 f"{r['max_rss_mb']:.0f} | {r['load_before']:.1f} | {r['steal']:.1%} | "
                 f"{r.get('wall_over_memcpy', float('nan')):.0f}x | {r['exposed_makespan_s']:.6f} | {r['labels']} |")
lines += ["", "Streamed and whole-matrix rows of one R print the same exposed makespan and labels (the",
          "whole evidence packet is bit-identical: tests/testbed/model_score_test.cpp). Wall time on this",
          "shared 2-core machine is bound by its load (the load-average column); CPU seconds are the",
          "machine-independent figure."]
open(os.path.join(out, "scale.md"), "w").write("\n".join(lines) + "\n")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
    for path, mk in (("streamed", "o-"), ("whole", "s--")):
        rs = [r for r in rows if r["path"] == path]
        if not rs: continue
        ax[0].loglog([r["ranks"] for r in rs], [r["wall_s"] for r in rs], mk, label=f"{path} wall")
        ax[0].loglog([r["ranks"] for r in rs], [r["cpu_s"] for r in rs], mk, alpha=0.4, label=f"{path} CPU")
        ax[1].loglog([r["ranks"] for r in rs], [r["max_rss_mb"] for r in rs], mk, label=path)
    ax[0].axhline(10, color="grey", lw=0.8, ls=":")
    ax[0].set(xlabel="ranks (100 steps)", ylabel="seconds", title="time (goal: 10 s at 10^6)")
    ax[1].set(xlabel="ranks (100 steps)", ylabel="peak RSS MB", title="memory (goal: 2 GiB)")
    ax[1].axhline(2048, color="grey", lw=0.8, ls=":")
    for a in ax: a.legend(fontsize=7)
    fig.suptitle(f"sf-testbed sim, commit {commit}")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scale.png"), dpi=110)
except ImportError:
    pass
PY
echo "scale_sim: wrote $OUT/scale.json, scale.md, scale.png" >&2
