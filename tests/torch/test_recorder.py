#!/usr/bin/python3
"""sf_torch.Recorder in one process (CTest torch.recorder): the recorder contract and the
byte-identical packet. Usage: test_recorder.py SF_TESTBED"""
import dataclasses
import inspect
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import numpy as np  # noqa: E402

import sf_torch  # noqa: E402
from sf_torch import _core  # noqa: E402

SF = None
STAGES = sf_torch.default_stages()
DATA, FWD, BWD, CB, OPT = range(5)


def run_steps(rec, n, first=0, fwd_s=0.001, data_s=0.0005, slow=None):
    for step in range(first, first + n):
        with rec.stage("data.next_wait"):
            time.sleep(data_s)
        with rec.step(step):
            with rec.stage("model.fwd_loss_cpu_wall"):
                time.sleep(fwd_s * (20 if slow == step else 1))
            with rec.stage("model.backward_cpu_wall"):
                time.sleep(0.001)
            with rec.stage("optim.step_cpu_wall"):
                pass
        rec.safe_point()
    rec.finish()


class RecorderTest(unittest.TestCase):
    # A recorder fault is one line on stderr; a test that expects none must see none.
    def setUp(self):
        self.stderr, self._stderr = io.StringIO(), sys.stderr
        sys.stderr = self.stderr
        self.expect_stderr = []  # regular expressions, one per line

    def tearDown(self):
        sys.stderr = self._stderr
        lines = self.stderr.getvalue().splitlines()
        self.assertEqual(len(lines), len(self.expect_stderr), lines)
        for line, pattern in zip(lines, self.expect_stderr):
            self.assertRegex(line, pattern)

    def test_schema_is_the_default(self):
        self.assertEqual(STAGES, ["data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall",
                                  "callbacks.cpu_wall", "optim.step_cpu_wall"])

    def test_prefetch_wait_is_charged_to_the_next_step(self):
        rec = sf_torch.Recorder(window_steps=5)
        run_steps(rec, 5, data_s=0.02)
        _, w, _ = rec.windows[0]
        for t in range(5):
            d = w.d(t, 0, DATA)
            self.assertGreater(d, 0.015, f"step {t}: data wait {d} not charged to the step")
            # The step's wall starts with its prefetch wait: the stages fit inside it.
            self.assertLessEqual(sum(w.d(t, 0, s) for s in range(5)), w.wall(t, 0) + 1e-9)
            self.assertGreater(w.wall(t, 0), d)

    def test_windows_and_final_partial_window(self):
        rec = sf_torch.Recorder(window_steps=4, first_step=2)
        run_steps(rec, 12)  # steps 0..11, recorded from 2: windows 2-5, 6-9, 10-11
        self.assertEqual([(w.first_step, w.steps) for _, w, _ in rec.windows], [(2, 4), (6, 4), (10, 2)])
        allw, ev = rec.summary()
        self.assertEqual((allw.first_step, allw.steps), (2, 10))
        self.assertEqual(ev.steps, 10)

    def test_the_gather_waits_four_steps_of_the_runs_pace(self):
        # gather_wait_s: the deadline until a step is recorded, then never less than GATHER_PACE_STEPS
        # times the median of this rank's last step walls (the C++ recorder's rule).
        rec = sf_torch.Recorder(window_steps=2, gather_deadline_s=0.01)
        self.assertEqual(rec.gather_wait_s(), 0.01)
        run_steps(rec, 5, fwd_s=0.03, slow=2)  # one 0.6 s step among 0.03 s ones: the median ignores it
        walls = sorted(w for rows in rec._window_rows.values() for w in rows[:, 2])
        self.assertEqual(len(walls), 5)
        self.assertEqual(rec.gather_wait_s(), sf_torch.recorder.GATHER_PACE_STEPS * walls[2])
        self.assertLess(rec.gather_wait_s(), 0.3)
        rec = sf_torch.Recorder(window_steps=2, gather_deadline_s=5.0)
        run_steps(rec, 3, fwd_s=0.03)
        self.assertEqual(rec.gather_wait_s(), 5.0)  # the deadline when the steps are short

    def test_overflow_drop_newest_counts(self):
        rec = sf_torch.Recorder(window_steps=10, capacity_steps=4)
        for step in range(6):  # no safe point: the ring fills at 4
            with rec.step(step):
                with rec.stage("model.fwd_loss_cpu_wall"):
                    pass
        self.assertEqual(rec.dropped, 2)
        rec.finish()
        _, w, ev = rec.windows[0]
        self.assertTrue(w.present(0, 0) and w.present(3, 0))
        self.assertFalse(w.present(4, 0))
        self.assertEqual(json.loads(ev.packet())["telemetry"]["dropped_records"], 2)

    def test_overflow_overwrite_oldest(self):
        rec = sf_torch.Recorder(window_steps=10, capacity_steps=4, overflow="overwrite_oldest")
        for step in range(6):
            with rec.step(step):
                pass
        self.assertEqual(rec.dropped, 2)
        rec.finish()
        _, w, _ = rec.windows[0]
        self.assertFalse(w.present(0, 0))
        self.assertTrue(w.present(5, 0))

    def test_misuse_drops_the_step_with_a_reason(self):
        rec = sf_torch.Recorder(window_steps=3)
        with rec.step(0):
            rec.begin_stage(BWD)
            rec.end_stage(BWD)
            rec.begin_stage(FWD)  # forward after backward: out of order
            rec.end_stage(FWD)
        with rec.step(1):
            rec.begin_stage(FWD)  # never closed
        with rec.step(2):
            pass
        rec.finish()
        _, w, ev = rec.windows[0]
        self.assertFalse(w.present(0, 0))
        self.assertFalse(w.present(1, 0))
        self.assertTrue(w.present(2, 0))
        self.assertFalse(w.gather_ok)
        text = " ".join(w.reasons)
        self.assertIn("step 0 dropped", text)
        self.assertIn("step 1 dropped", text)
        self.assertIn("telemetry_limited", json.loads(ev.packet())["labels"])

    def test_unknown_stage_is_one_clear_error(self):
        rec = sf_torch.Recorder(window_steps=3)
        with self.assertRaisesRegex(ValueError, "unknown stage 'model.fwd'"):
            rec.stage("model.fwd")

    def test_a_boundary_stores_perf_counter_ns_in_its_stage_cells(self):
        # begin_stage/end_stage and the `with` block are C (_core.StageRing, _core.StageSpan): the
        # same clock as time.perf_counter_ns(), written where the Python hot path wrote it.
        rec = sf_torch.Recorder(window_steps=3)
        self.assertIsInstance(rec, _core.StageRing)
        rec.begin_step(0)
        base = rec._base
        for call, cell in ((lambda: rec.begin_stage(FWD), 3 + 2 * FWD), (lambda: rec.end_stage(FWD), 4 + 2 * FWD)):
            t0 = time.perf_counter_ns()
            call()
            t1 = time.perf_counter_ns()
            self.assertTrue(t0 <= rec._buf[base + cell] <= t1, (t0, rec._buf[base + cell], t1))
        cm = rec.stage("model.backward_cpu_wall")
        self.assertIs(cm, rec.stage("model.backward_cpu_wall"))  # reused: no allocation per block
        t0 = time.perf_counter_ns()
        with self.assertRaisesRegex(KeyError, "inside"):
            with cm as entered:
                self.assertIsNone(entered)
                raise KeyError("inside")  # the block's exception goes on; the stage still ends
        t1 = time.perf_counter_ns()
        b, e = rec._buf[base + 3 + 2 * BWD], rec._buf[base + 4 + 2 * BWD]
        self.assertTrue(t0 <= b <= e <= t1, (t0, b, e, t1))
        self.assertIs(cm.__exit__(None, None, None), False)
        rec.end_step()
        self.assertEqual(rec._base, rec._pending)  # end_step's base is the one the C boundary reads
        rec.begin_stage(DATA)  # between steps: the pending slot (a prefetch wait)
        self.assertGreater(rec._buf[rec._pending + 3 + 2 * DATA], 0)
        rec.finish()

    def test_a_stage_index_outside_the_schema_is_one_clear_error(self):
        rec = sf_torch.Recorder(window_steps=3)
        rec.begin_step(0)
        for bad in (5, -1, 1 << 40):
            with self.assertRaisesRegex(IndexError, f"^stage index {bad} is outside the schema's 5 stages \\(0..4\\)$"):
                rec.begin_stage(bad)
            with self.assertRaises(IndexError):
                rec.end_stage(bad)
        with self.assertRaises(TypeError):
            rec.begin_stage(1.0)
        with self.assertRaises(TypeError):
            rec.end_stage("model.fwd_loss_cpu_wall")
        rec.begin_stage(np.int64(FWD))  # anything with __index__, as list indexing took it
        rec.end_stage(True)
        with self.assertRaises(IndexError):
            _core.StageSpan(rec, 5)
        with self.assertRaises(TypeError):
            _core.StageSpan(object(), 0)
        with self.assertRaisesRegex(TypeError, "must be a list"):
            rec._buf = (0,) * 10
        rec.end_step()
        rec.finish()

    def test_a_ring_not_set_up_is_an_error_not_a_crash(self):
        ring = _core.StageRing()
        ring.K = 5
        with self.assertRaisesRegex(RuntimeError, "ring is not set up"):
            ring.begin_stage(0)
        ring._buf = [0] * 4
        ring._base = 2  # cell 2 + 3 is past the list
        with self.assertRaisesRegex(RuntimeError, "ring is not set up"):
            ring.end_stage(0)

    def test_a_stand_in_clock_reaches_the_c_boundaries(self):
        # check_gather.py's deterministic clock replaces recorder._now before making the Recorder.
        from sf_torch import recorder
        ticks = iter(range(1000, 2000, 10))
        saved, recorder._now = recorder._now, lambda: next(ticks)
        try:
            rec = sf_torch.Recorder(window_steps=3)
        finally:
            recorder._now = saved
        rec.begin_step(0)  # recorder._now is the clock again: begin_step reads it, the boundaries keep theirs
        rec.begin_stage(FWD)
        with rec.stage("model.backward_cpu_wall"):
            pass
        rec.end_stage(FWD)
        base = rec._base
        self.assertEqual([rec._buf[base + 3 + 2 * FWD], rec._buf[base + 3 + 2 * BWD], rec._buf[base + 4 + 2 * BWD],
                          rec._buf[base + 4 + 2 * FWD]], [1000, 1010, 1020, 1030])
        rec._clock = None
        rec.begin_stage(FWD)
        self.assertGreater(rec._buf[base + 3 + 2 * FWD], 10**6)  # perf_counter_ns again
        with self.assertRaises(TypeError):
            rec._clock = 5

    def test_a_recorder_that_is_dropped_is_collected(self):
        import gc
        import weakref
        rec = sf_torch.Recorder(window_steps=3)
        rec.finish()
        ref = weakref.ref(rec)
        del rec
        gc.collect()  # its StageSpans hold it: a cycle through C objects the collector must see
        self.assertIsNone(ref())

    def test_stages_are_a_list_of_distinct_names(self):
        self.assertEqual(sf_torch.Recorder(stages=["a", "b"], window_steps=3).stages, ["a", "b"])
        self.assertEqual(sf_torch.Recorder(stages=("a",), window_steps=3).stages, ["a"])
        for stages, error, text in [
                ("abc", TypeError, r"stages is a string \('abc'\); expected a list of stage names"),
                (b"ab", TypeError, "stages is a string"),
                ({"a", "b"}, TypeError, "stages has type set; expected a list"),
                (["a", 3], TypeError, r"stages\[1\] is 3 of type int; expected a stage name"),
                (["a", None], TypeError, r"stages\[1\] is None of type NoneType"),
                (["a", "a"], ValueError, "stages: duplicate stage name 'a'"),
                (["a", "step.other_cpu_wall"], ValueError, "stages: step.other_cpu_wall is the residual stage"),
                (["a", ""], ValueError, "stages: stage name is empty"),
                ([], ValueError, "stages: stage list is empty")]:
            with self.subTest(stages=stages):
                with self.assertRaisesRegex(error, text):
                    sf_torch.Recorder(stages=stages, window_steps=3)

    def test_packet_is_byte_identical_to_score_json(self):
        with tempfile.TemporaryDirectory() as tmp:
            rec = sf_torch.Recorder(window_steps=6, out_dir=tmp)
            run_steps(rec, 12, slow=7)
            dump = os.path.join(tmp, "dump.jsonl")
            with open(dump, "w") as f:
                for _, w, _ in rec.windows:
                    f.write(w.to_jsonl())
            p = subprocess.run([SF, "score", "--json", dump], capture_output=True, text=True, check=True)
            lines = p.stdout.splitlines(keepends=True)
            self.assertEqual(len(lines), 2)
            for (index, _, ev), line in zip(rec.windows, lines):
                self.assertEqual(ev.packet() + "\n", line)
                with open(os.path.join(tmp, f"window_{index:03d}.json")) as f:
                    self.assertEqual(f.read(), line)

    # ---- fail-open: a telemetry fault downgrades the evidence, never the training loop ----------
    SUMMARY_KEYS = ["index", "first_step", "last_step", "shares", "labels", "diagnosis", "routing_set",
                    "median_step_s", "gather_ok", "packet_written", "whatif"]

    def assert_unwritten(self, ev, summary, why):
        """A window scored in memory whose packet is not on disk: its summary says why, and its
        evidence is telemetry_limited with the reason (the gather itself was fine)."""
        self.assertFalse(summary["packet_written"])
        self.assertIn(why, summary["packet_error"])
        p = json.loads(ev.packet())
        self.assertIn("telemetry_limited", p["labels"])
        self.assertTrue(p["telemetry"]["gather_ok"])  # the gather was fine
        self.assertTrue(any("not written" in r and why in r for r in p["downgrade_reasons"]), p["downgrade_reasons"])

    def test_a_torn_append_is_cut_back_and_the_windows_listed_once_space_returns(self):
        # A full disk: the append of windows.jsonl writes part of a line, then fails. The file
        # keeps whole lines; the window waits and is listed, in order, at the next append.
        from sf_torch import recorder as module
        real_open = open
        torn = {"on": False}

        class Torn:
            def __init__(self, path):
                self.f = real_open(path, "a")

            def write(self, text):
                self.f.write(text[: len(text) // 2])
                self.f.flush()
                raise OSError(28, "No space left on device")

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

        def fake_open(path, mode="r", *a, **k):
            if torn["on"] and mode == "a":
                return Torn(path)
            return real_open(path, mode, *a, **k)

        def read(path):
            with real_open(path) as f:
                return f.read()

        with tempfile.TemporaryDirectory() as tmp:
            rec = sf_torch.Recorder(window_steps=4, out_dir=tmp)
            module.open = fake_open
            try:
                run_steps(rec, 4, fwd_s=0.0005)  # window 0, listed
                torn["on"] = True
                rec2_lines = read(os.path.join(tmp, "windows.jsonl"))
                self.assertEqual(len(rec2_lines.splitlines()), 1)
                rec._unlisted.append('{"index": 1}')
                rec._list_windows()  # torn: cut back, kept
                text = read(os.path.join(tmp, "windows.jsonl"))
                self.assertEqual(text, rec2_lines)
                self.assertEqual(rec._unlisted, ['{"index": 1}'])
                torn["on"] = False  # space returns
                rec._unlisted.append('{"index": 2}')
                rec._list_windows()
                lines = read(os.path.join(tmp, "windows.jsonl")).splitlines()
                self.assertEqual([json.loads(x)["index"] for x in lines], [0, 1, 2])
                self.assertEqual(rec._unlisted, [])
            finally:
                del module.open
        self.expect_stderr = [r"^sf_torch: rank 0: telemetry could not be written \(cannot write .*windows\.jsonl: "
                              r"No space left on device\)"]

    def test_out_dir_that_cannot_be_written_is_said_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            open(os.path.join(tmp, "file"), "w").close()
            out = os.path.join(tmp, "file", "out")  # under a regular file
            rec = sf_torch.Recorder(window_steps=4, out_dir=out)
            self.assertEqual(len(rec.warnings), 1)  # at start-up, before the first window
            run_steps(rec, 12)  # never raises
            self.expect_stderr = [r"^sf_torch: rank 0: telemetry could not be written \(out_dir .*/file/out: Not a "
                                  r"directory\); windows are scored in memory only, their packets marked unwritten$"]
            self.assertEqual(len(rec.windows), 3)
            self.assertEqual(rec.packets_unwritten, 3)
            self.assertIn("/file/out: Not a directory", rec.write_problem)  # what a trainer's own files may skip saying
            for (index, _, ev), summary in zip(rec.windows, rec.summaries):
                self.assertEqual(summary["index"], index)
                self.assert_unwritten(ev, summary, "Not a directory")

    def test_a_packet_that_cannot_be_written_is_marked_and_scored(self):
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(os.path.join(tmp, "window_001.json"))  # that packet's path is a directory
            rec = sf_torch.Recorder(window_steps=4, out_dir=tmp)
            run_steps(rec, 12)
            self.expect_stderr = [r"^sf_torch: rank 0: telemetry could not be written \(cannot write "
                                  r".*/window_001.json: Is a directory\); windows are scored in memory only"]
            self.assertEqual([s["packet_written"] for s in rec.summaries], [True, False, True])
            self.assertRegex(rec.write_problem, r"^cannot write .*/window_001.json: Is a directory$")
            self.assertEqual(list(rec.summaries[0]), self.SUMMARY_KEYS)  # `run --out`'s windows.jsonl records
            self.assert_unwritten(rec.windows[1][2], rec.summaries[1], "Is a directory")
            self.assertNotIn("telemetry_limited", json.loads(rec.windows[0][2].packet())["labels"])
            with open(os.path.join(tmp, "windows.jsonl")) as f:
                self.assertEqual([json.loads(line) for line in f], rec.summaries)
            for index in (0, 2):
                with open(os.path.join(tmp, f"window_{index:03d}.json")) as f:
                    self.assertEqual(f.read(), rec.windows[index][2].packet() + "\n")
            self.assertEqual(sorted(os.listdir(tmp)), ["window_000.json", "window_001.json", "window_002.json",
                                                       "windows.jsonl"])  # no .tmp left behind

    def test_metrics_file_is_the_latest_window_as_prometheus_reads_it(self):
        from prometheus_client.parser import text_string_to_metric_families
        with tempfile.TemporaryDirectory() as tmp:
            prom = os.path.join(tmp, "sf.prom")
            rec = sf_torch.Recorder(window_steps=4, metrics_file=prom)
            run_steps(rec, 12)
            with open(prom) as f:
                families = {m.name: m for m in text_string_to_metric_families(f.read())}
            self.assertEqual(sorted(os.listdir(tmp)), ["sf.prom"])  # renamed over, no .tmp left
            windows = families["sf_windows"].samples[0]
            self.assertEqual(windows.value, 3)
            self.assertEqual(windows.labels["source"], "sf_torch")
            self.assertEqual(families["sf_steps"].samples[0].value, sum(ev.steps for _, _, ev in rec.windows))
            last = json.loads(rec.windows[-1][2].packet())
            share = {s.labels["stage"]: s.value for s in families["sf_stage_share"].samples}
            self.assertEqual(set(share), set(last["shares"]))
            for stage, v in last["shares"].items():
                self.assertAlmostEqual(share[stage], v, places=6)
            self.assertEqual(families["sf_window_last_step"].samples[0].value, last["window"]["last_step"])

    def test_a_metrics_file_that_cannot_be_written_is_said_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            prom = os.path.join(tmp, "missing", "sf.prom")
            rec = sf_torch.Recorder(window_steps=4, metrics_file=prom)
            run_steps(rec, 12)  # never raises
            self.expect_stderr = [r"^sf_torch: rank 0: metrics could not be written \(cannot write .*/missing/sf.prom: "
                                  r"No such file or directory\); it holds no window; training goes on$"]
            self.assertEqual(len(rec.windows), 3)
        with self.assertRaisesRegex(TypeError, "metrics_file is int; expected a path"):
            sf_torch.Recorder(window_steps=4, metrics_file=3)

    def test_files_are_never_clobbered_through_a_planted_name_or_a_device(self):
        # Issue 40, S2/S3: a fixed "<path>.tmp" followed a planted symlink (a victim file was
        # truncated), and a FIFO or device given as metrics_file was replaced by a regular file.
        with tempfile.TemporaryDirectory() as tmp:
            victim = os.path.join(tmp, "victim")
            with open(victim, "w") as f:
                f.write("keep me")
            out = os.path.join(tmp, "out")
            os.mkdir(out)
            prom = os.path.join(tmp, "sf.prom")
            for planted in (prom + ".tmp", os.path.join(out, "window_000.json.tmp"), os.path.join(out, "windows.jsonl")):
                os.symlink(victim, planted)
            rec = sf_torch.Recorder(window_steps=4, metrics_file=prom, out_dir=out)
            run_steps(rec, 8)
            with open(victim) as f:
                self.assertEqual(f.read(), "keep me")
            self.assertTrue(os.path.isfile(prom) and os.path.isfile(os.path.join(out, "window_000.json")))
            fifo = os.path.join(tmp, "fifo.prom")
            os.mkfifo(fifo)
            rec = sf_torch.Recorder(window_steps=4, metrics_file=fifo)
            run_steps(rec, 4)  # never blocks on the FIFO, never replaces it
            import stat as _stat
            self.assertTrue(_stat.S_ISFIFO(os.stat(fifo).st_mode))
            self.expect_stderr = [r"^sf_torch: rank 0: metrics could not be written \(cannot write .*fifo.prom: not a regular "
                                  r"file .*\); it holds no window; training goes on$"]

    def test_an_unforeseen_error_stops_the_recorder_not_the_loop(self):
        rec = sf_torch.Recorder(window_steps=4)

        def broken(window):
            raise RuntimeError("no room\nin the ring")
        rec._close_window = broken
        run_steps(rec, 8)  # never raises
        self.expect_stderr = [r"^sf_torch: rank 0: the recorder stopped \(RuntimeError: no room\); training continues "
                              r"unrecorded$"]
        self.assertEqual(rec.windows, [])
        self.assertFalse(rec.enabled)

    def test_a_sink_that_raises_is_said_once(self):
        calls = []

        def sink(w, ev, index):
            calls.append(index)
            raise ValueError("sink full")
        rec = sf_torch.Recorder(window_steps=4, sink=sink)
        run_steps(rec, 12)
        self.expect_stderr = [r"^sf_torch: rank 0: the sink raised ValueError: sink full \(window 0\); later windows "
                              r"still go to it$"]
        self.assertEqual(calls, [0, 1, 2])

    def test_a_sink_that_exits_or_interrupts_itself_never_ends_the_training(self):
        # Issue 40, T2: only Exception was caught; a sink raising SystemExit or KeyboardInterrupt
        # ended the training loop.
        for exc in (SystemExit(3), KeyboardInterrupt(), GeneratorExit()):
            calls = []

            def sink(w, ev, index, exc=exc):
                calls.append(index)
                raise exc
            rec = sf_torch.Recorder(window_steps=4, sink=sink)
            run_steps(rec, 12)  # never raises
            self.assertEqual(calls, [0, 1, 2], type(exc).__name__)
            self.assertTrue(any(f"the sink raised {type(exc).__name__}" in x for x in rec.warnings), rec.warnings)
            self.assertTrue(rec.enabled)
        self.expect_stderr = [r"^sf_torch: rank 0: the sink raised (SystemExit|KeyboardInterrupt|GeneratorExit)"] * 3

    def test_a_ctrl_c_while_the_sink_runs_stops_the_recorder_and_reaches_the_training(self):
        import signal as _signal

        def sink(w, ev, index):
            os.kill(os.getpid(), _signal.SIGINT)  # the user's Ctrl-C, arriving while the sink runs
            time.sleep(0.5)
        rec = sf_torch.Recorder(window_steps=4, sink=sink)
        with self.assertRaises(KeyboardInterrupt):
            run_steps(rec, 12)
        self.assertFalse(rec.enabled)
        self.assertIs(_signal.getsignal(_signal.SIGINT), _signal.default_int_handler)  # the lent handler is given back
        self.expect_stderr = [r"^sf_torch: rank 0: interrupted \(SIGINT\) while the sink ran: the recorder stopped"]

    def test_the_stage_count_is_bounded_in_one_error(self):
        with self.assertRaisesRegex(ValueError, r"^stages has 5000 names, above 256; expected at most 256 stages"):
            sf_torch.Recorder(stages=[f"s{i}" for i in range(5000)])
        sf_torch.Recorder(stages=[f"s{i}" for i in range(256)])  # the bound itself is fine

    def test_a_wait_model_stage_the_recorder_does_not_record_is_refused_up_front(self):
        with self.assertRaisesRegex(ValueError, r"^labeler_config: wait model: 'data\.nxt_wait' is not a stage group of "
                                                r"this window; expected one of data\.next_wait, "):
            sf_torch.Recorder(labeler_config='{"wait_model": ["data.nxt_wait"]}')
        sf_torch.Recorder(labeler_config='{"wait_model": ["model.backward_cpu_wall"]}')  # a stage it records

    def test_plot_file_draws_the_run_or_says_why_once(self):
        with self.assertRaisesRegex(ValueError, r"^plot_file 'x\.pdf': expected a file name ending in \.png or \.svg"):
            sf_torch.Recorder(plot_file="x.pdf")
        with tempfile.TemporaryDirectory() as d:
            rec = sf_torch.Recorder(window_steps=4, plot_file=os.path.join(d, "run.svg"))
            run_steps(rec, 8)
            rec.finish()
            self.assertTrue(os.path.getsize(os.path.join(d, "run.svg")) > 1000)
            self.assertEqual(rec.warnings, [])
            # A picture that cannot be drawn is said once; finish() returns (training goes on).
            self.expect_stderr = [r"^sf_torch: rank 0: plot_file .*/no/such/dir/run\.png: .*No such file or directory$"]
            rec = sf_torch.Recorder(window_steps=4, plot_file=os.path.join(d, "no", "such", "dir", "run.png"))
            run_steps(rec, 4)
            rec.finish()
            self.assertEqual(len([w for w in rec.warnings if w.startswith("plot_file ")]), 1, rec.warnings)

    def test_options_are_the_keyword_arguments_as_one_checked_value(self):
        opts = sf_torch.RecorderOptions(window_steps=4, capacity_steps=16, overflow="overwrite_oldest")
        by_kwargs = sf_torch.Recorder(window_steps=4, capacity_steps=16, overflow="overwrite_oldest")
        by_options = sf_torch.Recorder(options=opts)
        self.assertEqual(by_kwargs.options, opts)
        for rec in (by_kwargs, by_options):
            self.assertEqual((rec.window_steps, rec.capacity, rec.overflow, rec.stages),
                             (4, 16, sf_torch.OverflowPolicy.OVERWRITE_OLDEST, STAGES))
        # Recorder's keyword arguments are RecorderOptions' fields, by name, in order.
        params = list(inspect.signature(sf_torch.Recorder).parameters)
        self.assertEqual(params, [f.name for f in dataclasses.fields(sf_torch.RecorderOptions)] + ["options"])
        with self.assertRaisesRegex(ValueError, r"^Recorder: window_steps given both as keyword argument and in "
                                                r"options; expected one or the other"):
            sf_torch.Recorder(window_steps=4, options=opts)
        with self.assertRaisesRegex(ValueError, r"^window_steps is 0; expected a whole number in \[1, 2147483647\]$"):
            dataclasses.replace(opts, window_steps=0)
        with self.assertRaisesRegex(ValueError, r'^overflow is \'drop\'; expected one of "drop_newest", '):
            sf_torch.RecorderOptions(overflow="drop")
        with self.assertRaisesRegex(TypeError, r"^sink is int; expected a callable"):
            sf_torch.RecorderOptions(sink=3)
        with self.assertRaisesRegex(TypeError, r"^options is dict; expected sf_torch\.RecorderOptions$"):
            sf_torch.Recorder(options={"window_steps": 4})

    def test_numbers_out_of_range_or_not_finite_are_refused_in_one_line(self):
        # A nan deadline or sampling rate compares false with everything: it passed every check and
        # reached the gather; a huge window overflowed in the C++ binding ("cannot fit 'int' into an
        # index-sized integer"); 2.5 steps became 2.
        bad = [(dict(gather_deadline_s=float("nan")), ValueError, r"^gather_deadline_s is nan; expected a finite number in \[0\.001, 3600\]$"),
               (dict(gather_deadline_s=-1.0), ValueError, r"^gather_deadline_s is -1\.0; expected a finite number"),
               (dict(gather_deadline_s=float("inf")), ValueError, r"^gather_deadline_s is inf; expected"),
               (dict(event_q=1.5), ValueError, r"^event_q is 1\.5; expected a finite number in \[0, 1\]$"),
               (dict(event_q=float("nan")), ValueError, r"^event_q is nan; expected"),
               (dict(window_steps=10**30), ValueError, r"^window_steps is 10{30}; expected a whole number in \[1, 2147483647\]$"),
               (dict(window_steps=2.5), TypeError, r"^window_steps is 2\.5 of type float; expected a whole number \(int\)$"),
               (dict(capacity_steps=-5), ValueError, r"^capacity_steps is -5; expected a whole number in \[0, 2147483647\]$"),
               (dict(reference_steps=-1), ValueError, r"^reference_steps is -1; expected a whole number in \[0, "),
               (dict(first_step=True), TypeError, r"^first_step is True of type bool; expected a whole number"),
               (dict(gather_deadline_s="2"), TypeError, r"^gather_deadline_s is str; expected a number$")]
        for kwargs, error, text in bad:
            with self.subTest(**{k: repr(v) for k, v in kwargs.items()}):
                with self.assertRaisesRegex(error, text):
                    sf_torch.RecorderOptions(**kwargs)
                with self.assertRaisesRegex(error, text):
                    sf_torch.Recorder(**kwargs)
        # The ends of each range are taken, as numbers of any real or integral type.
        opts = sf_torch.RecorderOptions(gather_deadline_s=0.001, event_q=1, window_steps=2147483647, first_step=-3,
                                        capacity_steps=0, reference_steps=0)
        self.assertEqual((opts.gather_deadline_s, opts.event_q, opts.window_steps, opts.first_step),
                         (0.001, 1.0, 2147483647, -3))
        self.assertIsInstance(opts.event_q, float)

    def test_allreduce_hook_passes_ddps_annotation_check(self):
        # DistributedDataParallel._check_comm_hook: a bucket and return annotation, where present,
        # must be these objects (a string annotation is refused).
        import torch
        import torch.distributed as dist
        sig = inspect.signature(sf_torch.allreduce_hook)
        self.assertIn(sig.parameters["bucket"].annotation, (inspect.Parameter.empty, dist.GradBucket))
        self.assertIn(sig.return_annotation, (inspect.Signature.empty, torch.futures.Future[torch.Tensor]))

    def test_corrupt_contributions_are_judged_not_scored(self):
        rec = sf_torch.Recorder(window_steps=4)
        run_steps(rec, 4)
        rows = np.array(rec._window_rows[0])
        good = rec._payload(0, rows, [])
        got = rec._check(0, good.copy(), 0)
        self.assertFalse(isinstance(got, str), got)
        bad_magic = good.copy(); bad_magic[0] = 1.0
        other_rank = good.copy(); other_rank[1] = 5
        other_hash = good.copy(); other_hash[5] += 1
        too_many = good.copy(); too_many[3] = 99
        non_finite = good.copy(); non_finite[8 + 2] = np.inf
        for payload, what in [(bad_magic, "bad magic"), (other_rank, "claims rank 5"), (other_hash, "order hash"),
                              (too_many, "99 rows"), (non_finite, "non-finite")]:
            self.assertIn(what, rec._check(0, payload, 0))

    def test_window_rejects_bad_rows_as_telemetry(self):
        rows = np.array([[0, 0, 0.1, 0.01, 0.02, 0.03, 0, 0.01, 0, 0] + [np.nan] * 5,
                         [1, 0, 0.1, -0.5, 0.02, 0.03, 0, 0.01, 0, 0] + [np.nan] * 5])
        w = _core.Window(STAGES, 1, 0, 2, rows)
        self.assertTrue(w.present(0, 0))
        self.assertFalse(w.present(1, 0))
        self.assertFalse(w.gather_ok)


class PeersTest(unittest.TestCase):
    """sf_torch.peers: what a trainer says when a collective fails (train.py's lost-peer line)."""
    GLOO = ("Got the following error when running the callback: RuntimeError: [./gloo/transport/tcp/pair.cc:598] "
            "Connection closed by peer [127.0.0.1]:28828\n\nAt:\n  /usr/lib/python3/dist-packages/x.py(1): f")

    def test_one_line_keeps_what_gloo_said(self):
        one_line = sf_torch.peers.one_line
        self.assertEqual(one_line(RuntimeError(self.GLOO)), "Connection closed by peer [127.0.0.1]:28828")
        self.assertEqual(one_line(OSError(30, "Read-only file system")), "Read-only file system")
        self.assertEqual(one_line(ValueError("")), "ValueError")

    def test_only_a_connection_failure_asks_who_is_gone(self):
        self.assertTrue(sf_torch.peers.looks_like_lost_peer(RuntimeError(self.GLOO)))
        self.assertTrue(sf_torch.peers.looks_like_lost_peer(RuntimeError(
            "[../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:1: Connection reset by peer")))
        # The trainer's own error keeps its traceback: no roll call, no "rank R gone".
        self.assertFalse(sf_torch.peers.looks_like_lost_peer(RuntimeError("mat1 and mat2 shapes cannot be multiplied")))

    def test_no_process_group_no_lost_rank(self):
        self.assertEqual(sf_torch.lost_ranks(), [])


if __name__ == "__main__":
    SF = sys.argv.pop(1)
    unittest.main(verbosity=2)
