#!/usr/bin/python3
"""sf_torch.Recorder in one process (CTest torch.recorder): the recorder contract and the
byte-identical packet. Usage: test_recorder.py SF_TESTBED"""
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


if __name__ == "__main__":
    SF = sys.argv.pop(1)
    unittest.main(verbosity=2)
