#!/usr/bin/env bash
# Replays the CTests that issue 40's work added or changed (tests/ as at /work/main HEAD 7901b95)
# against the code of eb2df8e (the day the issue was filed).
#
# Setup (done once):
#   git -C /work/main worktree add /tmp/old40 eb2df8e
#   cd /tmp/old40 && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3 -DSF_BUILD_BENCH=OFF
#   nice -n 19 cmake --build build -j1 --target sf-testbed
#   nice -n 19 cmake --build build -j1 --target sf_torch_core       # the old sf_torch._core
#   mkdir /tmp/new40 && git -C /work/main archive HEAD tests examples | tar -x -C /tmp/new40
#   cp -a /tmp/new40/tests/. /tmp/old40/tests/   # NEW tests/ over the OLD tree: old cli/, formats/,
#                                                # python/, examples/ and binary; new test scripts and data
#
# usage: replay_old40.sh [NAME_REGEX]   (logs: /tmp/replay40/logs/NAME.log; verdicts: /tmp/replay40/summary.tsv)
# Each test is judged by its CTest's criterion: the exit code of the command (expect.sh, sh -c, the
# Python checker), or for mpi.listen_loopback its PASS_REGULAR_EXPRESSION. Commands are those of
# `ctest -N -V` in /work/main/build with /work/main/build/sf-testbed -> the old binary,
# /work/main/tests -> the new tests in $T, /work/main -> $O, build/tests/... -> /tmp/replay40/...
set -u
O=/tmp/old40                      # old source tree (eb2df8e) with the new tests/ copied over it
SF=${SF_BIN:-$O/build/sf-testbed}   # the OLD binary (SF_BIN=... for a control run with another binary)
T=$O/tests                        # the NEW test scripts and data
H=$T/data/hostile K=$T/data/kineto EX=$O/examples
EXPECT=$T/golden/expect.sh
W=${REPLAY_DIR:-/tmp/replay40}
G=$W/golden LONG=$W/golden/long_lines IMPORT_OUT=$W/golden/import_hostile.jsonl
mkdir -p $W/logs $G $LONG $W/tests/mpi/out
SUM=$W/summary.tsv
only=${1:-.}
MAX_RSS=(/usr/bin/python3 $T/golden/max_rss.py 256)
MPIENV=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1)
# The old binary reads a line with no break whole (a 1 GB line once took 8.26 GB; /dev/zero never
# ends): the long-line and bomb cases run with the address space capped at 2 GiB so that the replay
# cannot take the machine. The CTests' own bound is 256 MiB, so a capped run fails them either way.
CAP=(bash -c 'ulimit -v 2097152; exec "$@"' cap)

# t NAME PASS_REGEX|- CWD COMMAND...
t() {
  local name=$1 pass_re=$2 cwd=$3; shift 3
  [[ $name =~ $only ]] || return 0
  local log=$W/logs/$name.log t0=$SECONDS verdict
  (cd "$cwd" && timeout 300 nice -n 10 "$@") >"$log" 2>&1
  local rc=$?
  if [ "$pass_re" != - ]; then grep -Eq -- "$pass_re" "$log" && verdict=PASS || verdict=FAIL
  else [ $rc -eq 0 ] && verdict=PASS || verdict=FAIL; fi
  [ $rc -eq 124 ] && verdict="FAIL(timeout)"
  printf '%s\t%s\trc=%s\t%ss\n' "$name" "$verdict" "$rc" $((SECONDS - t0)) | tee -a "$SUM"
}

# ---- golden: hostile inputs (tests/golden/CMakeLists.txt) ---------------------------------------
t golden.hostile_nul_in_line_jsonl - $G $EXPECT 2 '^sf-testbed score: .*hostile/nul_in_line\.jsonl:2: a NUL byte at column 30 \(binary data\?\). expected one JSON object per line of text' - -- $SF score $H/nul_in_line.jsonl
t golden.hostile_nul_at_end_jsonl - $G $EXPECT 2 '^sf-testbed score: .*hostile/nul_at_end\.jsonl:2: a NUL byte at column 30 ' - -- $SF score $H/nul_at_end.jsonl
t golden.hostile_kineto_steps_min_max - $G $EXPECT 2 "^sf-testbed import kineto: .*hostile/kineto_steps_min_r0\\.json: step annotation 'ProfilerStep#-9223372036854775808' has a negative step id. expected ProfilerStep#N with N >= 0" - -- $SF import kineto $H/kineto_steps_min_r0.json $H/kineto_steps_max_r1.json --out $IMPORT_OUT
t golden.kineto_map_open_bracket - $G $EXPECT 2 "^sf-testbed import kineto: .*kineto_map_open_bracket\\.json: stages\\[0\\] \"match\" pattern \"\\[sparse\\*\" has a '\\[' with no closing '\\]'" - -- $SF import kineto $K/sparse_rank0.json --stage-map $H/kineto_map_open_bracket.json --out $IMPORT_OUT
t golden.kineto_disjoint - $G $EXPECT 2 "^sf-testbed import kineto: .*no ProfilerStep id is in every trace \\(.*rank0\\.json 1\\.\\.3, .*kineto_disjoint_rank1\\.json 101\\.\\.103\\). expected traces of one job's same steps \\(or --allow-disjoint" - -- $SF import kineto $K/rank0.json $H/kineto_disjoint_rank1.json --out $IMPORT_OUT
t golden.kineto_disjoint_allowed - $G sh -c "$SF import kineto --quiet --allow-disjoint '$K/rank0.json' '$H/kineto_disjoint_rank1.json' --out '$G/disjoint.jsonl' && grep -q 'imported with --allow-disjoint: each step has the ranks that recorded it' '$G/disjoint.jsonl'"
t golden.kineto_inference_no_rank - $G $EXPECT 2 '^sf-testbed import kineto: .*kineto_inference_no_rank\.json: no backward events in any of its 3 ProfilerStep spans' - -- $SF import kineto $H/kineto_inference_no_rank.json --out $IMPORT_OUT
t golden.kineto_map_matches_nothing - $G $EXPECT 2 '^sf-testbed import kineto: .*sparse_rank0\.json: --stage-map stages\[1\] \("wait_sparse" -> data\.next_wait\) matched no event in any step of the traces on the main thread. expected patterns' - -- $SF import kineto $K/sparse_rank0.json --stage-map $H/kineto_map_matches_nothing.json --out $IMPORT_OUT
S=$G/same_file
t golden.out_is_input - $G sh -c "rm -rf '$S' && mkdir -p '$S' && cp '$K/sparse_rank0.json' '$EX/figure1.jsonl' '$S/' && cd '$S' && ln -s figure1.jsonl link.jsonl && sum0=\$(cat sparse_rank0.json figure1.jsonl | cksum) && $EXPECT 2 'import kineto: --out ./sparse_rank0.json is the input sparse_rank0.json .*expected another path' - -- $SF import kineto sparse_rank0.json --out ./sparse_rank0.json && $EXPECT 2 'score: --out link.jsonl is the input figure1.jsonl .*expected another path' - -- $SF score figure1.jsonl --out link.jsonl && $EXPECT 2 'score: --metrics figure1.jsonl is the input' - -- $SF score figure1.jsonl --metrics figure1.jsonl && test \"\$sum0\" = \"\$(cat sparse_rank0.json figure1.jsonl | cksum)\""
# Not a CTest: what each of the three clobbering commands does to its input with the old binary.
X=$G/same_file.x
t extra.out_is_input_effect - $G sh -c "rm -rf '$X' && mkdir -p '$X' && cp '$K/sparse_rank0.json' '$EX/figure1.jsonl' '$X/' && cd '$X' && ln -s figure1.jsonl link.jsonl && cksum sparse_rank0.json figure1.jsonl; $SF import kineto sparse_rank0.json --out ./sparse_rank0.json; echo \"import --out = input: exit \$?\"; cksum sparse_rank0.json; head -c 150 sparse_rank0.json; echo; $SF score figure1.jsonl --out link.jsonl >/dev/null; echo \"score --out link-to-input: exit \$?\"; cksum figure1.jsonl; head -c 150 figure1.jsonl; echo; cp '$EX/figure1.jsonl' .; $SF score figure1.jsonl --metrics figure1.jsonl >/dev/null; echo \"score --metrics = input: exit \$?\"; cksum figure1.jsonl; head -c 150 figure1.jsonl; echo"
LONG_RE='runs past 16777216 bytes without a line break. expected records of at most that length \(raise the limit with --max-line-bytes\)$'
t golden.long_line_jsonl - $G "${CAP[@]}" $EXPECT 2 "^sf-testbed score: .*long\\.jsonl:1: line 1 $LONG_RE" - -- "${MAX_RSS[@]}" --make $LONG/long.jsonl 67108864 jsonl -- $SF score $LONG/long.jsonl
t golden.long_line_csv - $G "${CAP[@]}" $EXPECT 2 "^sf-testbed score: .*long\\.csv:2: line 2 $LONG_RE" - -- "${MAX_RSS[@]}" --make $LONG/long.csv 67108864 csv -- $SF score $LONG/long.csv
t golden.long_line_dev_zero - $G "${CAP[@]}" $EXPECT 2 "^sf-testbed score: /dev/zero:1: line 1 $LONG_RE" - -- "${MAX_RSS[@]}" -- $SF score --format jsonl /dev/zero
t golden.long_line_reference_dev_zero - $G "${CAP[@]}" $EXPECT 2 "^sf-testbed score: /dev/zero:1: line 1 $LONG_RE" - -- "${MAX_RSS[@]}" -- $SF score $EX/figure2.jsonl --reference /dev/zero
t golden.long_line_pipe - $G "${CAP[@]}" sh -c "head -c 67108864 /dev/zero | tr '\\0' a | $EXPECT 2 '^sf-testbed score: /dev/stdin:1: line 1 runs past 16777216 bytes' - -- ${MAX_RSS[*]} -- $SF score --format jsonl /dev/stdin"
t golden.long_line_raised - $G "${CAP[@]}" $EXPECT 2 "^sf-testbed score: .*long2\\.csv:2: column 'a' is '1111" - -- "${MAX_RSS[@]}" --make $LONG/long2.csv 20971520 csv -- $SF score --max-line-bytes 33554432 $LONG/long2.csv
t golden.experiment_tag_escape - $G $EXPECT 2 "^sf-testbed experiment: --tag '../../x' is not a plain name" - -- $SF experiment fixtures --tag ../../x --out $G/tag_results
t golden.experiment_name_escape - $G $EXPECT 2 "^sf-testbed experiment: '../fixtures' is not a plain experiment name" - -- $SF experiment ../fixtures --out $G/tag_results

# ---- import: the kept-events bomb (tests/kineto/check_bomb.py gained it) -------------------------
mkdir -p $W/tests
t import.kineto_bomb - $W/tests "${CAP[@]}" /usr/bin/python3 $T/kineto/check_bomb.py $SF $W/tests/kineto_bomb

# ---- install: find_package(sf COMPONENTS c) of each component on its own -------------------------
t install.consumer - $W/tests $T/install/check_install.sh $O/build $O

# ---- MPI (one at a time) -------------------------------------------------------------------------
t mpi.validate_fail_exits_1 - $W/tests/mpi "${MPIENV[@]}" OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader sh -c "out=\$(/usr/bin/mpiexec -n 2 '$SF' validate --device cpu --no-p2p --gemm-n 256 --compute-slowdown 1:4); rc=\$?; echo \"\$out\" | tail -4; echo \"validate exit \$rc\"; test \$rc -eq 1 && echo \"\$out\" | grep -q '^# result: FAIL' && echo \"\$out\" | grep -q '^# confirmed: 0 link pair(s) and 1 rank(s)'"
t mpi.listen_loopback 'PASS: every listening' $W/tests/mpi /usr/bin/python3 $T/check_listen.py $O $W/tests/mpi/out/listen_loopback --run $SF /usr/bin/mpiexec

# ---- torch: the old python/sf_torch, old examples/torch_ddp/train.py, old _core ($O/build/python/sf_torch)
t torch.listen_loopback - $W/tests /usr/bin/python3 $T/check_listen.py $O $W/tests/torch_listen
t torch.gather_shared_out_dir - $W/tests /usr/bin/python3 $T/torch/check_gather.py shared_out
# failopen_plain is the fixture (the unrecorded run's losses) the others compare with; SKIP_RETURN_CODE 77.
for m in plain readonly readonly_out full; do
  t torch.failopen_$m - $W/tests /usr/bin/python3 $T/torch/check_failopen.py $m $O $W/tests/torch_failopen
done
t torch.recorder - $W/tests /usr/bin/python3 $T/torch/test_recorder.py $SF
t torch.default_recorder_mid_run - $W/tests /usr/bin/python3 $T/torch/check_default_recorder.py mid_run $O $O/build/python/sf_torch

# ---- extras (not CTests): what the old binary does where a CTest fails on the message only ------
# ProfilerStep#-1 (the case; the CTest uses INT64_MIN, which the old binary already refused
# at the window-size limit)
sed 's/ProfilerStep#1"/ProfilerStep#-1"/' $K/sparse_rank0.json > $W/neg_step_rank0.json
t extra.negative_step_id - $W sh -c "$SF import kineto $W/neg_step_rank0.json --out $W/neg.jsonl; echo \"exit \$?\"; false"
# --tag escaping --out, run where experiments/specs exists (the CTest's cwd has no specs, so the
# old binary refuses 'fixtures' as unknown there); the run is cut at 15 s, then its directories listed
rm -rf $W/tagx; mkdir -p $W/tagx/out
t extra.experiment_tag_from_repo_root - $O sh -c "timeout 15 $SF experiment fixtures --quick --tag ../../../escaped --out $W/tagx/out; echo \"exit \$?\"; find $W/tagx -maxdepth 2 -type d; false"
# the kept-events bomb without the 2 GiB address-space cap
t extra.kineto_bomb_uncapped - $W/tests /usr/bin/python3 $T/kineto/check_bomb.py $SF $W/tests/kineto_bomb_nocap

# ---- unit tests (gtest), built from the NEW test sources against the OLD libraries ----------------
# kineto_test.cpp's KinetoStages.user_annotations_a_fallback_backward_swallows_are_named uses
# Trace::in_fallback and kineto_fallback_line (added by 706c59f): it cannot compile against eb2df8e,
# so for this build it was put under #if 0 (then the file was restored). diagnose_test.cpp's new
# tests (Standing.*cohort_min_s, WhatIf.exclusion_and_rebalance*) are not issue 40 and use fields
# eb2df8e lacks: not built.
#   nice -n 19 cmake --build $O/build -j1 --target formats_test kineto_test
t unit.formats_test - $O/build/tests ./formats_test --gtest_filter='Jsonl.malformed_inputs_name_the_line_and_the_expectation:Kineto.out_of_range_integers_are_refused_never_narrowed'
t unit.kineto_test - $O/build/tests ./kineto_test --gtest_filter='KinetoSync.a_collective_past_its_step_counts_in_the_next_one_too'
